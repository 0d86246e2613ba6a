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

import hashlib
import tempfile

import orjson
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

SEQ_ID_TRACKS = 3
_THREAD_UUID = 0x7A00_0000_0000_0000
_PROCESS_UUID = 0x7B00_0000_0000_0000
_NAMED_UUID = 0x7C00_0000_0000_0000


def _uuid(base: int, *key) -> int:
    """A stable 48-bit id for `key` (str hash() is salted per process)."""
    return base | int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=6).digest(), "little")


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


class PerfettoTrackSink(TrackSink):
    """TrackEvents on their own packet sequence, names interned per sequence."""

    def __init__(self, write_packet, thread_tgid=None):
        self._write = write_packet  # callable(TracePacket) -> None; sets nothing itself
        self._tgid = thread_tgid or (lambda tid: None)
        self._tracks: set[int] = set()
        self._names: dict[str, int] = {}
        self._cats: dict[str, int] = {}
        self._ann: dict[str, int] = {}
        self._lanes = _Lanes()
        self._first = True

    def _packet(self, pkt: pb.TracePacket) -> None:
        pkt.trusted_packet_sequence_id = SEQ_ID_TRACKS
        if self._first:
            pkt.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self._first = False
        else:
            pkt.sequence_flags = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        self._write(pkt)

    def _intern(self, pkt, table: dict, field: str, s: str) -> int:
        iid = table.get(s)
        if iid is None:
            iid = table[s] = len(table) + 1
            getattr(pkt.interned_data, field).add(iid=iid, name=s)
        return iid

    def _descriptor(self, uuid: int, fill, ts: int | None = None) -> None:
        if uuid in self._tracks:
            return
        self._tracks.add(uuid)
        pkt = pb.TracePacket()
        if ts is not None:
            # Without a timestamp trace_processor binds the descriptor to the
            # thread/process alive at whatever time it sorts it to, and makes
            # an unnamed duplicate when that one is not alive yet or any more.
            pkt.timestamp = ts
        pkt.track_descriptor.uuid = uuid
        fill(pkt.track_descriptor)
        self._packet(pkt)

    def _thread_track(self, tid: int, pid: int | None, ts: int | None = None) -> int:
        uuid = _THREAD_UUID | tid
        pid = pid if pid is not None else self._tgid(tid)

        def fill(d):
            d.thread.tid = tid
            d.thread.pid = pid if pid is not None else tid
        self._descriptor(uuid, fill, ts)
        return uuid

    def _process_track(self, pid: int, ts: int | None = None) -> int:
        uuid = _PROCESS_UUID | pid
        self._descriptor(uuid, lambda d: setattr(d.process, "pid", pid), ts)
        return uuid

    def _event(self, pkt, ts: int, typ, uuid: int, name: str | None, cat: str | None, args: dict | None):
        pkt.timestamp = ts
        te = pkt.track_event
        te.type = typ
        te.track_uuid = uuid
        if name is not None:
            te.name_iid = self._intern(pkt, self._names, "event_names", name)
        if cat is not None:
            te.category_iids.append(self._intern(pkt, self._cats, "event_categories", cat))
        if args:
            for k, v in args.items():
                if v is None:
                    continue
                a = te.debug_annotations.add(name_iid=self._intern(pkt, self._ann, "debug_annotation_names", k))
                if isinstance(v, bool):
                    a.bool_value = v
                elif isinstance(v, int):
                    if v >= 1 << 63:
                        a.uint_value = v
                    else:
                        a.int_value = v
                elif isinstance(v, float):
                    a.double_value = v
                else:
                    a.string_value = str(v)
        return te

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None):
        uuid = self._thread_track(tid, pid, ts)
        self._span(uuid, ts, dur, name, cat, args, flow_out, flow_in)

    def _span(self, uuid, ts, dur, name, cat, args, flow_out=None, flow_in=None):
        b = pb.TracePacket()
        te = self._event(b, ts, pb.TrackEvent.TYPE_SLICE_BEGIN, uuid, name, cat, args)
        if flow_out is not None:
            te.flow_ids.append(flow_out)
        if flow_in is not None:
            te.terminating_flow_ids.append(flow_in)
        self._packet(b)
        e = pb.TracePacket()
        self._event(e, ts + max(dur, 0), pb.TrackEvent.TYPE_SLICE_END, uuid, None, None, None)
        self._packet(e)

    def instant(self, ts, tid, pid, name, cat, args=None):
        p = pb.TracePacket()
        self._event(p, ts, pb.TrackEvent.TYPE_INSTANT, self._thread_track(tid, pid, ts), name, cat, args)
        self._packet(p)

    def async_slice(self, track, ts, dur, name, cat, args=None):
        parent = _uuid(_NAMED_UUID, "async", track)
        self._descriptor(parent, lambda d: setattr(d, "name", track))
        lane = self._lanes.lane(track, ts, ts + max(dur, 0))
        uuid = parent if lane == 0 else _uuid(_NAMED_UUID, "lane", track, lane)
        if lane:
            def fill(d):
                d.name = track
                d.parent_uuid = parent
            self._descriptor(uuid, fill)
        self._span(uuid, ts, dur, name, cat, args)

    def counter(self, name, ts, value, pid=None):
        uuid = _uuid(_NAMED_UUID, "counter", name, pid)

        def fill(d):
            d.name = name
            d.counter.SetInParent()
            if pid is not None:
                d.parent_uuid = self._process_track(pid, ts)
        self._descriptor(uuid, fill, ts)
        p = pb.TracePacket()
        te = self._event(p, ts, pb.TrackEvent.TYPE_COUNTER, uuid, None, None, None)
        if isinstance(value, int):
            te.counter_value = value
        else:
            te.double_counter_value = float(value)
        self._packet(p)


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
