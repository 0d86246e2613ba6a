"""The Perfetto TrackSink: families' slices, instants, counters and flows as
TrackEvents on a packet sequence of their own, hand-encoded (wire.py).

What trace_processor makes of them:
- `slice(tid=...)`: a slice on that thread's track (`thread_track`), args as
  debug annotations -> `extract_arg(arg_set_id, 'debug.<key>')`.
- `async_slice(track=...)`: slices on a named global track; overlapping
  slices go to extra lanes (child tracks of the same name) because a track's
  slices must nest.
- `counter(name, pid=...)`: a process-scoped counter track named `name`
  (global when pid is None).
- arg values: trace_processor stores ints as int64 (hex str for pointers).
- flows: `flow_out` on the source slice, `flow_in` on each destination
  (`flow` table links them).
- track groups: a top-level track with a child track per named track.
"""
from __future__ import annotations

import itertools

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ..columns import Rows, hexes, table
from ..interface import Column, Lanes, TrackSink, flow_columns, flow_ids, groups_by_args
from .fields import (
    ARG_BOOL, ARG_DOUBLE, ARG_INT, ARG_NAME_IID, ARG_STRING, ARG_STRING_IID, ARG_UINT, COUNTER,
    EV_CATEGORY_IIDS, EV_COUNTER_VALUE, EV_DEBUG_ANNOTATIONS, EV_DOUBLE_COUNTER_VALUE, EV_FLOW_IDS,
    EV_NAME_IID, EV_TERMINATING_FLOW_IDS, EV_TRACK_UUID, EV_TYPE, INSTANT, INTERNED_ARG_NAMES,
    INTERNED_CATEGORIES, INTERNED_EVENT_NAMES, INTERNED_IID, INTERNED_STRING, INTERNED_STRING_VALUES,
    PKT_INTERNED_DATA, PKT_SEQUENCE_FLAGS, PKT_SEQUENCE_ID, PKT_TIMESTAMP, PKT_TRACK_EVENT, SEQ_CLEARED,
    SEQ_NEEDS_STATE, SLICE_BEGIN, SLICE_END, TRACE_PACKET)
from .wire import I64, LEN, VARINT, f_double, f_fixed64, f_len, f_varint, key

SEQ_ID_TRACKS = 3
# Thread and process track descriptors go on a sequence of their own, with no
# events: trace_processor (v52) lets a sequence's thread descriptor stand for
# the thread of every event on that sequence, so on SEQ_ID_TRACKS an event
# older than the thread (a process start-up slice, a disk counter) would
# create the thread and its process early, and the real fork a second,
# "ghost" copy of both.
SEQ_ID_THREADS = 4

# Strings of an arg key are interned (sent once, then referred to by id)
# until the key has this many distinct values: kernel names, copy kinds and
# dims repeat, pointers do not.
_MAX_INTERNED_PER_KEY = 4096
_ARG_CACHE_MAX = 1 << 17


class PerfettoTrackSink(TrackSink):
    """TrackEvents on their own packet sequence, hand-encoded.

    Event names, categories, arg names and repeated string arg values are
    interned per sequence; track uuids are small sequential numbers (short
    varints).  Track descriptors, written once per track, are protobuf
    messages.
    """

    def __init__(self, write_raw, thread_tgid=None, write_framed=None, lifetime=None):
        self._write = write_raw  # callable(serialized TracePacket bytes)
        # lifetime("process" | "thread", id) -> (fork time, exit time), None
        # where unknown.  trace_processor binds a thread/process track to the
        # thread/process alive when it first meets the track (its descriptor
        # or an event on it) and creates one when none is: a second, "ghost"
        # copy of a process that starts later or has ended.  So descriptors
        # are timestamped inside the lifetime, and process counter samples
        # older than the process (a rate bucket that began before the fork)
        # are moved to just after the fork.
        self._lifetime = lifetime or (lambda kind, ident: (None, None))
        # callable(bytes of whole Trace.packet fields) for the bulk calls; without it they go row by row
        self._write_framed = write_framed
        self._tgid = thread_tgid or (lambda tid: None)
        self._uuids: dict[tuple, int] = {}
        self._tables = {f: {} for f in (INTERNED_EVENT_NAMES, INTERNED_CATEGORIES, INTERNED_ARG_NAMES, INTERNED_STRING_VALUES)}
        self._strvals_per_key: dict[str, int] = {}
        self._end_body: dict[int, bytes] = {}
        self._arg_cache: dict[tuple, bytes] = {}
        self._lanes = Lanes()
        self._seq_tail = f_varint(PKT_SEQUENCE_ID, SEQ_ID_TRACKS) + f_varint(PKT_SEQUENCE_FLAGS, SEQ_NEEDS_STATE)
        self._first = True
        self._first_threads = True  # nothing written on SEQ_ID_THREADS yet
        self._pending = bytearray()  # interned_data entries for the next packet
        self._hex_iids: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # arg key -> (sorted values, iids)
        self._stacks = None  # stacks.StackSamples, on the first stack_samples
        self._thread_stacks = None  # stacks.ThreadStackSamples, on the first timer samples
        self.mono_offset_ns = None  # BOOTTIME - MONOTONIC of the recording, where its header says

    # -- packets
    def _emit(self, ts: int | None, body: bytes) -> None:
        """One TracePacket: timestamp, track_event body, pending interned data."""
        out = bytearray()
        if ts is not None:
            out += f_varint(PKT_TIMESTAMP, ts)
        if body:
            out += f_len(PKT_TRACK_EVENT, body)
        if self._pending:
            out += f_len(PKT_INTERNED_DATA, bytes(self._pending))
            self._pending.clear()
        if self._first:
            out += f_varint(PKT_SEQUENCE_ID, SEQ_ID_TRACKS) + f_varint(PKT_SEQUENCE_FLAGS, SEQ_CLEARED)
            self._first = False
        else:
            out += self._seq_tail
        self._write(bytes(out))

    def _pb_packet(self, pkt: pb.TracePacket, threads: bool = False) -> None:
        if threads:
            pkt.trusted_packet_sequence_id = SEQ_ID_THREADS
            pkt.sequence_flags = SEQ_CLEARED if self._first_threads else SEQ_NEEDS_STATE
            self._first_threads = False
        else:
            pkt.trusted_packet_sequence_id = SEQ_ID_TRACKS
            pkt.sequence_flags = SEQ_CLEARED if self._first else SEQ_NEEDS_STATE
            self._first = False
        self._write(pkt.SerializeToString())

    def _intern(self, field: int, s: str) -> int:
        table = self._tables[field]
        iid = table.get(s)
        if iid is None:
            iid = table[s] = len(table) + 1
            self._pending += f_len(field, f_varint(INTERNED_IID, iid) + f_len(INTERNED_STRING, s.encode()))
        return iid

    # -- tracks
    def _track(self, key: tuple, fill, ts: int | None) -> int:
        uuid = self._uuids.get(key)
        if uuid is None:
            uuid = self._uuids[key] = len(self._uuids) + 1
            pkt = pb.TracePacket()
            if ts is not None:
                # Without a timestamp trace_processor binds the descriptor to the
                # thread/process alive at whatever time it sorts it to, and makes
                # an unnamed duplicate when that one is not alive yet or any more.
                pkt.timestamp = ts
            pkt.track_descriptor.uuid = uuid
            fill(pkt.track_descriptor)
            self._pb_packet(pkt, threads=key[0] in ("thread", "process"))
        return uuid

    def _thread_track(self, tid: int, pid: int | None, ts: int | None = None) -> int:
        pid = pid if pid is not None else self._tgid(tid)

        def fill(d):
            d.thread.tid = tid
            d.thread.pid = pid if pid is not None else tid
        return self._track(("thread", tid), fill, self._within("thread", tid, ts))

    def _process_track(self, pid: int, ts: int | None = None) -> int:
        return self._track(("process", pid), lambda d: setattr(d.process, "pid", pid),
                           self._within("process", pid, ts))

    # -- events
    def _args(self, args: dict) -> bytes:
        # Most (key, value) pairs repeat (grid, kind, ret, stream...): each is
        # encoded once.  The cache is bounded; unique values (pointers) just
        # stop being added once it is full.
        cache = self._arg_cache
        out = []
        for k, v in args.items():
            item = (k, v, v.__class__)  # True == 1 == 1.0: the type keeps them apart
            enc = cache.get(item)
            if enc is None:
                if v is None:
                    continue
                enc = self._arg(k, v)
                if len(cache) < _ARG_CACHE_MAX:
                    cache[item] = enc
            out.append(enc)
        return b"".join(out)

    def _arg(self, k: str, v) -> bytes:
        a = f_varint(ARG_NAME_IID, self._intern(INTERNED_ARG_NAMES, k))
        if isinstance(v, bool):
            a += f_varint(ARG_BOOL, int(v))
        elif isinstance(v, int):
            a += f_varint(ARG_UINT if v >= 1 << 63 else ARG_INT, v)
        elif isinstance(v, float):
            a += f_double(ARG_DOUBLE, v)
        else:
            s = str(v)
            table = self._tables[INTERNED_STRING_VALUES]
            if s in table or self._strvals_per_key.get(k, 0) < _MAX_INTERNED_PER_KEY:
                if s not in table:
                    self._strvals_per_key[k] = self._strvals_per_key.get(k, 0) + 1
                a += f_varint(ARG_STRING_IID, self._intern(INTERNED_STRING_VALUES, s))
            else:
                a += f_len(ARG_STRING, s.encode())
        return f_len(EV_DEBUG_ANNOTATIONS, a)

    def _event_body(self, typ: int, uuid: int, name: str, cat: str, args: dict | None,
                    flow_out: int | None = None, flow_in: int | None = None) -> bytes:
        body = (f_varint(EV_TYPE, typ) + f_varint(EV_TRACK_UUID, uuid) + f_varint(EV_NAME_IID, self._intern(INTERNED_EVENT_NAMES, name))
                + f_varint(EV_CATEGORY_IIDS, self._intern(INTERNED_CATEGORIES, cat)))
        if args:
            body += self._args(args)
        for fid in flow_ids(flow_out):
            body += f_fixed64(EV_FLOW_IDS, fid)
        for fid in flow_ids(flow_in):
            body += f_fixed64(EV_TERMINATING_FLOW_IDS, fid)
        return body

    def _span(self, uuid, ts, dur, name, cat, args, flow_out=None, flow_in=None):
        self._emit(ts, self._event_body(SLICE_BEGIN, uuid, name, cat, args, flow_out, flow_in))
        end = self._end_body.get(uuid)
        if end is None:
            end = self._end_body[uuid] = f_varint(EV_TYPE, SLICE_END) + f_varint(EV_TRACK_UUID, uuid)
        self._emit(ts + max(dur, 0), end)

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None):
        self._span(self._thread_track(tid, pid, ts), ts, dur, name, cat, args, flow_out, flow_in)

    def instant(self, ts, tid, pid, name, cat, args=None):
        self._emit(ts, self._event_body(INSTANT, self._thread_track(tid, pid, ts), name, cat, args))

    def async_slice(self, track, ts, dur, name, cat, args=None):
        parent = self._track(("async", track), lambda d: setattr(d, "name", track), None)
        lane = self._lanes.lane(track, ts, ts + max(dur, 0))
        uuid = parent
        if lane:
            def fill(d):
                d.name = track
                d.parent_uuid = parent
            uuid = self._track(("lane", track, lane), fill, None)
        self._span(uuid, ts, dur, name, cat, args)

    def _group_track(self, group: str, track: str | None = None, lane: int = 0, counter: bool = False) -> int:
        """A top-level named track (the group), or a child track of it."""
        g = self._track(("group", group), lambda d: setattr(d, "name", group), None)
        if track is None:
            return g

        def fill(d):
            d.name = track
            d.parent_uuid = g
            if counter:
                d.counter.SetInParent()
        return self._track(("gtrack", group, track, lane, counter), fill, None)

    def group_slices(self, group, track, ts, dur, name, cat, args=(), flow_out=None, flow_in=None, lane=0):
        n = len(ts)
        if n == 0:
            return
        uuid = self._group_track(group, track, lane)
        if self._write_framed is None:  # row by row
            fo = np.asarray(flow_out).tolist() if flow_out is not None else [None] * n
            fi = np.asarray(flow_in).tolist() if flow_in is not None else [None] * n
            names = name.pylist() if isinstance(name, Column) else itertools.repeat(name, n)
            cats = cat.pylist() if isinstance(cat, Column) else itertools.repeat(cat, n)
            cols = [(c.key, c.pylist()) for c in args]
            for i, (t, d, nm, ct) in enumerate(zip(np.asarray(ts).tolist(), np.asarray(dur).tolist(), names, cats)):
                self._span(uuid, t, d, nm, ct, {k: v[i] for k, v in cols if v[i] is not None}, fo[i], fi[i])
            return
        ts = np.asarray(ts).astype(np.int64, copy=False)
        end = ts + np.maximum(np.asarray(dur).astype(np.int64, copy=False), 0)
        self._bulk_spans(ts, end, np.full(n, uuid, np.int64), name, cat, args, flow_out, flow_in)

    def group_counters(self, group, name, ts, values):
        n = len(ts)
        if n == 0:
            return
        uuid = self._group_track(group, name, counter=True)
        values = np.asarray(values)
        if self._write_framed is None:
            for t, v in zip(np.asarray(ts).tolist(), values.tolist()):
                body = f_varint(EV_TYPE, COUNTER) + f_varint(EV_TRACK_UUID, uuid)
                body += f_varint(EV_COUNTER_VALUE, v) if isinstance(v, int) else f_double(EV_DOUBLE_COUNTER_VALUE, float(v))
                self._emit(t, body)
            return
        self._bulk_counter(uuid, np.asarray(ts).astype(np.int64, copy=False), values)

    def _after_start(self, pid: int | None, ts):
        """ts, or for a process counter no earlier than 1 ns after its fork."""
        start = self._lifetime("process", pid)[0] if pid is not None else None
        if start is None:
            return ts
        return np.maximum(ts, start + 1) if isinstance(ts, np.ndarray) else max(ts, start + 1)

    def _within(self, kind: str, ident: int, ts: int | None) -> int | None:
        """A descriptor timestamp inside the lifetime of thread/process ident."""
        if ts is None:
            return None
        start, end = self._lifetime(kind, ident)
        if end is not None:
            ts = min(ts, end)
        if start is not None:
            ts = max(ts, start + 1)
        return ts

    def counter(self, name, ts, value, pid=None):
        ts = self._after_start(pid, ts)

        def fill(d):
            d.name = name
            d.counter.SetInParent()
            if pid is not None:
                d.parent_uuid = self._process_track(pid, ts)
        uuid = self._track(("counter", name, pid), fill, ts if pid is None else self._within("process", pid, ts))
        body = f_varint(EV_TYPE, COUNTER) + f_varint(EV_TRACK_UUID, uuid)
        if isinstance(value, int):
            body += f_varint(EV_COUNTER_VALUE, value)
        else:
            body += f_double(EV_DOUBLE_COUNTER_VALUE, float(value))
        self._emit(ts, body)

    # -- bulk
    def _flush_pending(self) -> None:
        """Interned data (and the sequence's first flags) in a packet of their
        own, ahead of a bulk write that refers to them."""
        if self._pending or self._first:
            self._emit(None, b"")

    def _str_values(self, c: Column, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """DebugAnnotation value fields of a "str" column: one encoding per string used (a table)."""
        used = np.unique(codes)
        enc = [b""] * len(c.strings)
        for i in used.tolist():
            enc[i] = self._str_value(c.key, c.strings[i])
        return table(enc)

    def _str_value(self, k: str, s: str) -> bytes:
        table_ = self._tables[INTERNED_STRING_VALUES]
        if s in table_ or self._strvals_per_key.get(k, 0) < _MAX_INTERNED_PER_KEY:
            if s not in table_:
                self._strvals_per_key[k] = self._strvals_per_key.get(k, 0) + 1
            return f_varint(ARG_STRING_IID, self._intern(INTERNED_STRING_VALUES, s))
        return f_len(ARG_STRING, s.encode())

    def _hex_interned(self, k: str, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(interned?, iid) per row of a "hex" column; interns new values while
        the key has room (pointers that repeat: streams, events, handles)."""
        known, iids = self._hex_iids.get(k, (np.zeros(0, np.uint64), np.zeros(0, np.int64)))
        room = _MAX_INTERNED_PER_KEY - self._strvals_per_key.get(k, 0)
        if room > 0:
            u = np.unique(vals)
            pos = np.minimum(np.searchsorted(known, u), max(known.size - 1, 0))
            new = u[~((known.size > 0) & (known[pos] == u))][:room] if known.size else u[:room]
            if new.size:
                self._strvals_per_key[k] = self._strvals_per_key.get(k, 0) + int(new.size)
                add = np.array([self._intern(INTERNED_STRING_VALUES, f"{v:#x}") for v in new.tolist()], np.int64)
                known, iids = np.concatenate([known, new]), np.concatenate([iids, add])
                o = np.argsort(known, kind="stable")
                known, iids = known[o], iids[o]
                self._hex_iids[k] = (known, iids)
        if not known.size:
            return np.zeros(vals.size, bool), np.zeros(vals.size, np.int64)
        pos = np.minimum(np.searchsorted(known, vals), known.size - 1)
        return known[pos] == vals, iids[pos]

    def _arg_encoder(self, c: Column):
        """A function of row indices -> Rows of this argument's DebugAnnotation
        (name and value, without the field key and length) for those rows.
        Interning is decided here, once for all rows."""
        name = f_varint(ARG_NAME_IID, self._intern(INTERNED_ARG_NAMES, c.key))
        vals = c.values
        present = c.mask()
        if c.kind == "int":
            def enc(idx):
                v = vals[idx]
                a = Rows(v.size).const(name)
                if v.dtype == np.uint64:  # protobuf uint64 past int64: the unsigned field
                    a.piece(np.where(v >= np.uint64(1 << 63), ARG_UINT << 3, ARG_INT << 3).astype(np.uint8)[:, None],
                            np.ones(v.size, np.int64))
                else:
                    a.const(key(ARG_INT, VARINT))
                return a.varint(v)
        elif c.kind == "float":
            def enc(idx):
                v = vals[idx].astype("<f8")
                return Rows(v.size).const(name + key(ARG_DOUBLE, I64)).piece(v.view(np.uint8).reshape(v.size, 8),
                                                                          np.full(v.size, 8))
        elif c.kind == "str":
            strings = self._str_values(c, vals[present])

            def enc(idx):
                return Rows(idx.size).const(name).gather(strings, vals[idx])
        elif c.kind == "hex":  # interned string id, or the string itself
            interned, iids = np.zeros(vals.size, bool), np.zeros(vals.size, np.int64)
            interned[present], iids[present] = self._hex_interned(c.key, vals[present])

            def enc(idx):
                v, yes = vals[idx], interned[idx]
                a = Rows(v.size).const(name)
                if yes.any():
                    a.const(key(ARG_STRING_IID, VARINT), yes).varint(iids[idx], yes)
                no = ~yes
                if no.any():
                    m, lens = hexes(v)
                    a.const(key(ARG_STRING, LEN), no).varint(lens + 2, no).const(b"0x", no).piece(m, lens, no, right=True)
                return a
        else:
            raise ValueError(f"unknown column kind {c.kind!r}")
        return enc

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None):
        n = len(ts)
        if n == 0:
            return
        if self._write_framed is None:
            return super().slices(ts, dur, tid, pid, name, cat, args, flow_out, flow_in)
        ts = np.asarray(ts).astype(np.int64, copy=False)
        end = ts + np.maximum(np.asarray(dur).astype(np.int64, copy=False), 0)
        tid = np.asarray(tid)
        # Thread tracks: a descriptor for each thread not seen before, at its earliest slice here.
        threads, first, inv = np.unique(tid, return_index=True, return_inverse=True)
        inv = inv.ravel()
        earliest = np.full(threads.size, np.iinfo(np.int64).max)
        np.minimum.at(earliest, inv, ts)
        uuids = np.array([self._thread_track(t, None if pid is None else int(pid[i]), t0)
                          for t, i, t0 in zip(threads.tolist(), first.tolist(), earliest.tolist())], np.int64)
        self._bulk_spans(ts, end, uuids[inv], name, cat, args, flow_out, flow_in)

    def _bulk_spans(self, ts, end, uuid, name, cat, args, flow_out, flow_in) -> None:
        """Begin/end packets of n slices on the tracks `uuid` (one per row)."""
        n = ts.size
        name_cat = []
        for field, table_, v in ((EV_NAME_IID, INTERNED_EVENT_NAMES, name), (EV_CATEGORY_IIDS, INTERNED_CATEGORIES, cat)):
            if isinstance(v, Column):
                name_cat.append((field, np.array([self._intern(table_, s) for s in v.strings], np.int64)[v.values]))
            else:
                name_cat.append((field, f_varint(field, self._intern(table_, v))))
        encoders = {id(c): self._arg_encoder(c) for c in args}
        flows = [(num, col) for num, ids in ((EV_FLOW_IDS, flow_out), (EV_TERMINATING_FLOW_IDS, flow_in)) if ids is not None
                 for col in flow_columns(ids)]
        ts_key, seq_tail = key(PKT_TIMESTAMP, VARINT), self._seq_tail
        out = []
        for idx, cols in groups_by_args(n, args):
            m = idx.size
            # TrackEvent: type, track, name, category, debug annotations, flows
            body = Rows(m).const(f_varint(EV_TYPE, SLICE_BEGIN) + key(EV_TRACK_UUID, VARINT)).varint(uuid[idx])
            for field, v in name_cat:
                if isinstance(v, bytes):
                    body.const(v)
                else:
                    body.const(key(field, VARINT)).varint(v[idx])
            for c in cols:
                a = encoders[id(c)](idx)
                body.const(key(EV_DEBUG_ANNOTATIONS, LEN)).varint(a.total()).extend(a)
            for num, ids in flows:
                has = ids[idx] != 0
                body.const(key(num, I64), has).piece(ids[idx].view(np.uint8).reshape(m, 8), np.full(m, 8), has)
            begin = Rows(m).const(ts_key).varint(ts[idx]).const(key(PKT_TRACK_EVENT, LEN)).varint(body.total())
            begin.extend(body).const(seq_tail)
            end_body = Rows(m).const(f_varint(EV_TYPE, SLICE_END) + key(EV_TRACK_UUID, VARINT)).varint(uuid[idx])
            end_pkt = Rows(m).const(ts_key).varint(end[idx]).const(key(PKT_TRACK_EVENT, LEN)).varint(end_body.total())
            end_pkt.extend(end_body).const(seq_tail)
            packets = Rows(m)
            for pkt in (begin, end_pkt):  # begin and end of a slice side by side, each framed as Trace.packet
                packets.const(key(TRACE_PACKET, LEN)).varint(pkt.total()).extend(pkt)
            out.append(packets.build())
        self._flush_pending()
        self._write_framed(b"".join(out))

    def stack_samples(self, ts, tid, pid, stack, callstacks, frames, label=None, timer=False):
        if timer and self.mono_offset_ns is not None:
            if self._thread_stacks is None:
                from .stacks import ThreadStackSamples
                self._thread_stacks = ThreadStackSamples(self._write, self.mono_offset_ns)
            if self._thread_stacks.has_room(len(np.unique(np.asarray(tid)))):
                self._thread_stacks.write(ts, tid, pid, stack, callstacks, frames)
                return
        if self._stacks is None:
            from .stacks import StackSamples
            self._stacks = StackSamples(self._write, self._write_framed)
        self._stacks.write(ts, tid, pid, stack, callstacks, frames)

    def finish(self) -> None:
        if self._thread_stacks is not None:
            self._thread_stacks.finish()

    def counters(self, name, ts, values, pid=None):
        n = len(ts)
        if n == 0:
            return
        values = np.asarray(values)
        if self._write_framed is None or values.dtype.kind not in "iuf":
            return super().counters(name, ts, values, pid)
        ts = self._after_start(pid, np.asarray(ts).astype(np.int64, copy=False))

        def fill(d):
            d.name = name
            d.counter.SetInParent()
            if pid is not None:
                d.parent_uuid = self._process_track(pid, int(ts[0]))
        uuid = self._track(("counter", name, pid), fill,
                           int(ts[0]) if pid is None else self._within("process", pid, int(ts[0])))
        self._bulk_counter(uuid, ts, values)

    def _bulk_counter(self, uuid: int, ts: np.ndarray, values: np.ndarray) -> None:
        n = ts.size
        body = Rows(n).const(f_varint(EV_TYPE, COUNTER) + f_varint(EV_TRACK_UUID, uuid))
        if values.dtype.kind == "f":
            body.const(key(EV_DOUBLE_COUNTER_VALUE, I64)).piece(values.astype("<f8").view(np.uint8).reshape(n, 8),
                                                   np.full(n, 8))
        else:
            body.const(key(EV_COUNTER_VALUE, VARINT)).varint(values)
        pkt = Rows(n).const(key(PKT_TIMESTAMP, VARINT)).varint(ts).const(key(PKT_TRACK_EVENT, LEN)).varint(body.total())
        pkt.extend(body).const(self._seq_tail)
        self._flush_pending()
        self._write_framed(Rows(n).const(key(TRACE_PACKET, LEN)).varint(pkt.total()).extend(pkt).build())
