"""Slices, instants, counters and flows for event families, in either format.

Families other than sched/proc (CUDA calls, ioctls, block I/O, counters)
describe what they want on the timeline through a TrackSink; the sink writes
Perfetto TrackEvents (with interned names) or Chrome JSON events.  Keeping
one interface means a family converter is written once for both formats.

Perfetto conventions (what trace_processor makes of them):
- `slice(tid=...)`: a slice on that thread's track (`thread_track`), args as
  debug annotations -> `extract_arg(arg_set_id, 'debug.<key>')`.
- `async_slice(track=...)`: slices on a named global track; overlapping
  slices go to extra lanes (child tracks of the same name) because a track's
  slices must nest.
- `counter(name, pid=...)`: a process-scoped counter track named `name`
  (global when pid is None).
- arg values: int, float, bool or str.  trace_processor stores ints as
  int64, so pass pointers and other values that may reach 2**63 as hex str.
- flows: `flow_out` on the source slice, `flow_in` on each destination
  (`flow` table links them).

Chrome JSON: "X" events (args under `args.<key>`), "b"/"e" async events with
a lane id, "C" counters (trace_processor names them "<name> value"), "s"/"f"
flow events.  They are spooled to a temporary file while the sched text
streams and written into `traceEvents` at the end.
"""
from __future__ import annotations

import tempfile

import orjson
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .protowire import f_double, f_fixed64, f_len, f_varint

SEQ_ID_TRACKS = 3


class TrackSink:
    """The interface family converters write to."""

    def slice(self, ts: int, dur: int, tid: int, pid: int | None, name: str, cat: str,
              args: dict | None = None, flow_out: int | None = None, flow_in: int | None = None) -> None:
        raise NotImplementedError

    def instant(self, ts: int, tid: int, pid: int | None, name: str, cat: str, args: dict | None = None) -> None:
        raise NotImplementedError

    def async_slice(self, track: str, ts: int, dur: int, name: str, cat: str, args: dict | None = None) -> None:
        raise NotImplementedError

    def counter(self, name: str, ts: int, value: float, pid: int | None = None) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        pass


class _Lanes:
    """Assigns overlapping intervals on one named track to non-overlapping lanes."""

    def __init__(self):
        self.ends: dict[str, list[int]] = {}

    def lane(self, track: str, ts: int, end: int) -> int:
        ends = self.ends.setdefault(track, [])
        for i, e in enumerate(ends):
            if e <= ts:
                ends[i] = end
                return i
        ends.append(end)
        return len(ends) - 1


# TracePacket / TrackEvent / DebugAnnotation / InternedData field numbers
# (perfetto_trace.proto), for the hand-encoded hot path.
_PKT_TS, _PKT_EVENT, _PKT_SEQ, _PKT_INTERNED, _PKT_FLAGS = 8, 11, 10, 12, 13
_TE_TYPE, _TE_TRACK, _TE_NAME, _TE_CATS, _TE_ARGS = 9, 11, 10, 3, 4
_TE_COUNTER, _TE_DCOUNTER, _TE_FLOW, _TE_FLOW_END = 30, 44, 47, 48
_DA_NAME, _DA_BOOL, _DA_UINT, _DA_INT, _DA_DOUBLE, _DA_STR, _DA_STR_IID = 1, 2, 3, 4, 5, 6, 17
_ID_NAMES, _ID_CATS, _ID_ARGNAMES, _ID_STRVALS = 2, 1, 3, 29
_BEGIN, _END, _INSTANT, _COUNTER = 1, 2, 3, 4
_SEQ_CLEARED, _SEQ_NEEDS = 1, 2
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

    def __init__(self, write_raw, thread_tgid=None):
        self._write = write_raw  # callable(serialized TracePacket bytes)
        self._tgid = thread_tgid or (lambda tid: None)
        self._uuids: dict[tuple, int] = {}
        self._tables = {f: {} for f in (_ID_NAMES, _ID_CATS, _ID_ARGNAMES, _ID_STRVALS)}
        self._strvals_per_key: dict[str, int] = {}
        self._end_body: dict[int, bytes] = {}
        self._arg_cache: dict[tuple, bytes] = {}
        self._lanes = _Lanes()
        self._seq_tail = f_varint(_PKT_SEQ, SEQ_ID_TRACKS) + f_varint(_PKT_FLAGS, _SEQ_NEEDS)
        self._first = True
        self._pending = bytearray()  # interned_data entries for the next packet

    # -- packets
    def _emit(self, ts: int | None, body: bytes) -> None:
        """One TracePacket: timestamp, track_event body, pending interned data."""
        out = bytearray()
        if ts is not None:
            out += f_varint(_PKT_TS, ts)
        if body:
            out += f_len(_PKT_EVENT, body)
        if self._pending:
            out += f_len(_PKT_INTERNED, bytes(self._pending))
            self._pending.clear()
        if self._first:
            out += f_varint(_PKT_SEQ, SEQ_ID_TRACKS) + f_varint(_PKT_FLAGS, _SEQ_CLEARED)
            self._first = False
        else:
            out += self._seq_tail
        self._write(bytes(out))

    def _pb_packet(self, pkt: pb.TracePacket) -> None:
        pkt.trusted_packet_sequence_id = SEQ_ID_TRACKS
        pkt.sequence_flags = _SEQ_CLEARED if self._first else _SEQ_NEEDS
        self._first = False
        self._write(pkt.SerializeToString())

    def _intern(self, field: int, s: str) -> int:
        table = self._tables[field]
        iid = table.get(s)
        if iid is None:
            iid = table[s] = len(table) + 1
            self._pending += f_len(field, f_varint(1, iid) + f_len(2, s.encode()))
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
            self._pb_packet(pkt)
        return uuid

    def _thread_track(self, tid: int, pid: int | None, ts: int | None = None) -> int:
        pid = pid if pid is not None else self._tgid(tid)

        def fill(d):
            d.thread.tid = tid
            d.thread.pid = pid if pid is not None else tid
        return self._track(("thread", tid), fill, ts)

    def _process_track(self, pid: int, ts: int | None = None) -> int:
        return self._track(("process", pid), lambda d: setattr(d.process, "pid", pid), ts)

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
        a = f_varint(_DA_NAME, self._intern(_ID_ARGNAMES, k))
        if isinstance(v, bool):
            a += f_varint(_DA_BOOL, int(v))
        elif isinstance(v, int):
            a += f_varint(_DA_UINT if v >= 1 << 63 else _DA_INT, v)
        elif isinstance(v, float):
            a += f_double(_DA_DOUBLE, v)
        else:
            s = str(v)
            table = self._tables[_ID_STRVALS]
            if s in table or self._strvals_per_key.get(k, 0) < _MAX_INTERNED_PER_KEY:
                if s not in table:
                    self._strvals_per_key[k] = self._strvals_per_key.get(k, 0) + 1
                a += f_varint(_DA_STR_IID, self._intern(_ID_STRVALS, s))
            else:
                a += f_len(_DA_STR, s.encode())
        return f_len(_TE_ARGS, a)

    def _event_body(self, typ: int, uuid: int, name: str, cat: str, args: dict | None,
                    flow_out: int | None = None, flow_in: int | None = None) -> bytes:
        body = (f_varint(_TE_TYPE, typ) + f_varint(_TE_TRACK, uuid) + f_varint(_TE_NAME, self._intern(_ID_NAMES, name))
                + f_varint(_TE_CATS, self._intern(_ID_CATS, cat)))
        if args:
            body += self._args(args)
        if flow_out is not None:
            body += f_fixed64(_TE_FLOW, flow_out)
        if flow_in is not None:
            body += f_fixed64(_TE_FLOW_END, flow_in)
        return body

    def _span(self, uuid, ts, dur, name, cat, args, flow_out=None, flow_in=None):
        self._emit(ts, self._event_body(_BEGIN, uuid, name, cat, args, flow_out, flow_in))
        end = self._end_body.get(uuid)
        if end is None:
            end = self._end_body[uuid] = f_varint(_TE_TYPE, _END) + f_varint(_TE_TRACK, uuid)
        self._emit(ts + max(dur, 0), end)

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None):
        self._span(self._thread_track(tid, pid, ts), ts, dur, name, cat, args, flow_out, flow_in)

    def instant(self, ts, tid, pid, name, cat, args=None):
        self._emit(ts, self._event_body(_INSTANT, self._thread_track(tid, pid, ts), name, cat, args))

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

    def counter(self, name, ts, value, pid=None):
        def fill(d):
            d.name = name
            d.counter.SetInParent()
            if pid is not None:
                d.parent_uuid = self._process_track(pid, ts)
        uuid = self._track(("counter", name, pid), fill, ts)
        body = f_varint(_TE_TYPE, _COUNTER) + f_varint(_TE_TRACK, uuid)
        if isinstance(value, int):
            body += f_varint(_TE_COUNTER, value)
        else:
            body += f_double(_TE_DCOUNTER, float(value))
        self._emit(ts, body)


class ChromeTrackSink(TrackSink):
    """Chrome JSON events, spooled to a temp file until `drain_into`."""

    def __init__(self, thread_tgid=None):
        self._tgid = thread_tgid or (lambda tid: None)
        self._spool = tempfile.TemporaryFile()
        self._n = 0
        self._lanes = _Lanes()
        self._async_ids: dict[tuple[str, int], int] = {}

    def _emit(self, ev: dict) -> None:
        self._spool.write(orjson.dumps(ev) + b",\n")
        self._n += 1

    def _pid(self, tid, pid):
        if pid is not None:
            return pid
        tg = self._tgid(tid)
        return tg if tg is not None else tid

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None):
        pid = self._pid(tid, pid)
        ev = {"ph": "X", "ts": ts / 1000, "dur": max(dur, 0) / 1000, "pid": pid, "tid": tid, "name": name, "cat": cat}
        if args:
            ev["args"] = {k: v for k, v in args.items() if v is not None}
        self._emit(ev)
        if flow_out is not None:
            self._emit({"ph": "s", "id": flow_out, "ts": ts / 1000, "pid": pid, "tid": tid, "name": "flow", "cat": cat})
        if flow_in is not None:
            self._emit({"ph": "f", "bp": "e", "id": flow_in, "ts": ts / 1000, "pid": pid, "tid": tid,
                        "name": "flow", "cat": cat})

    def instant(self, ts, tid, pid, name, cat, args=None):
        ev = {"ph": "i", "s": "t", "ts": ts / 1000, "pid": self._pid(tid, pid), "tid": tid, "name": name, "cat": cat}
        if args:
            ev["args"] = {k: v for k, v in args.items() if v is not None}
        self._emit(ev)

    def async_slice(self, track, ts, dur, name, cat, args=None):
        lane = self._lanes.lane(track, ts, ts + max(dur, 0))
        aid = self._async_ids.setdefault((track, lane), len(self._async_ids) + 1)
        base = {"cat": cat, "name": name, "id": aid, "pid": 0, "tid": 0}
        b = {"ph": "b", "ts": ts / 1000, **base}
        if args:
            b["args"] = {"track": track, **{k: v for k, v in args.items() if v is not None}}
        self._emit(b)
        self._emit({"ph": "e", "ts": (ts + max(dur, 0)) / 1000, **base})

    def counter(self, name, ts, value, pid=None):
        self._emit({"ph": "C", "ts": ts / 1000, "pid": pid if pid is not None else 0, "name": name,
                    "args": {"value": value}})

    @property
    def count(self) -> int:
        return self._n

    def drain_into(self, write) -> None:
        """Copy the spooled events (each followed by ',\\n') through `write`."""
        self._spool.seek(0)
        while True:
            chunk = self._spool.read(1 << 20)
            if not chunk:
                break
            write(chunk)
        self._spool.close()
