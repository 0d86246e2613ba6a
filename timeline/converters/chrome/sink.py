"""The Chrome JSON TrackSink: families' events as Chrome trace events.

"X" events (args under `args.<key>`), "b"/"e" async events with a lane id,
"C" counters (trace_processor names them "<name> value"), "s"/"f" flow
events; track groups are a pseudo process each with a pseudo thread per
track.  They are spooled to a temporary file while the sched text streams
and written into `traceEvents` at the end (ChromeJsonWriter.finish).

Call stacks (the pystack family): the trace format's `stackFrames`
dictionary (id -> name, category, parent; one id per distinct frame and
caller), written after `traceEvents`; a slice whose `py` column names a
stack points at its innermost frame (`sf`), and a stack sample is an
instant event ("i", name "sample") with `sf` and the `py` text.
trace_processor (v52) loads neither `stackFrames` nor `sf` nor a top-level
`samples` array: the `py` args are what Perfetto shows; chrome://tracing
(catapult) shows the stacks.
"""
from __future__ import annotations

import tempfile

import numpy as np
import orjson

from ..columns import Rows, decimals, table
from ..interface import Column, Lanes, TrackSink, flow_columns, flow_ids, frame_name, groups_by_args

# Chrome JSON ties every event to a pid.  System-wide tracks (devices, the
# recorder's notes) go to this pseudo process, named by the writer: with pid 0
# trace_processor's JSON parser makes a second process 0 next to the idle one.
JSON_SYSTEM_PID = 4194304 + 2  # above PID_MAX_LIMIT, after model.OUTSIDE_TID and the JSON idle thread
JSON_SYSTEM_NAME = "system-wide (devices, recorder)"
# Track groups (GPUs) in Chrome JSON: a pseudo process each, a pseudo thread per
# track, numbered above PID_MAX_LIMIT so they never meet a real pid or tid.
JSON_GROUP_PID = 4194304 + 16
JSON_GROUP_TID = 4194304 + 4096
SAMPLE_NAME, SAMPLE_CAT = "sample", "python"  # a stack sample's instant event


class ChromeTrackSink(TrackSink):
    """Chrome JSON events, spooled to a temp file until `drain_into`."""

    def __init__(self, thread_tgid=None):
        self._tgid = thread_tgid or (lambda tid: None)
        self._spool = tempfile.TemporaryFile()
        self._n = 0
        self._lanes = Lanes()
        self._async_ids: dict[tuple[str, int], int] = {}
        self.used_system = False  # an event went to JSON_SYSTEM_PID (the writer names it)
        self._groups: dict[str, int] = {}                      # group -> pseudo pid
        self._group_tracks: dict[tuple[str, str, int], int] = {}  # (group, track, lane) -> pseudo tid
        self._frame_ids: dict[tuple, int] = {}   # (function, file, line, parent id) -> stackFrames id
        self._frame_json: list[bytes] = []       # by id - 1: '"id":{...}'
        self._stack_ids: dict[tuple, int] = {}   # frames, innermost first -> id of the innermost

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
        for fid in flow_ids(flow_out):
            self._emit({"ph": "s", "id": fid, "ts": ts / 1000, "pid": pid, "tid": tid, "name": "flow", "cat": "flow"})
        for fid in flow_ids(flow_in):
            self._emit({"ph": "f", "bp": "e", "id": fid, "ts": ts / 1000, "pid": pid, "tid": tid,
                        "name": "flow", "cat": "flow"})

    def instant(self, ts, tid, pid, name, cat, args=None):
        ev = {"ph": "i", "s": "t", "ts": ts / 1000, "pid": self._pid(tid, pid), "tid": tid, "name": name, "cat": cat}
        if args:
            ev["args"] = {k: v for k, v in args.items() if v is not None}
        self._emit(ev)

    def async_slice(self, track, ts, dur, name, cat, args=None):
        lane = self._lanes.lane(track, ts, ts + max(dur, 0))
        aid = self._async_ids.setdefault((track, lane), len(self._async_ids) + 1)
        self.used_system = True
        base = {"cat": cat, "name": name, "id": aid, "pid": JSON_SYSTEM_PID, "tid": JSON_SYSTEM_PID}
        b = {"ph": "b", "ts": ts / 1000, **base}
        if args:
            b["args"] = {"track": track, **{k: v for k, v in args.items() if v is not None}}
        self._emit(b)
        self._emit({"ph": "e", "ts": (ts + max(dur, 0)) / 1000, **base})

    def counter(self, name, ts, value, pid=None):
        self.used_system |= pid is None
        self._emit({"ph": "C", "ts": ts / 1000, "pid": pid if pid is not None else JSON_SYSTEM_PID, "name": name,
                    "args": {"value": value}})

    # -- call stacks
    def _sf(self, frames: tuple) -> int | None:
        """The stackFrames id of a stack's innermost frame (frames innermost
        first, each (function, file, line)); None for an empty stack."""
        sid = self._stack_ids.get(frames)
        if sid is None and frames:
            parent = None
            for fn, path, line in reversed(frames):
                key = (fn, path, line, parent)
                fid = self._frame_ids.get(key)
                if fid is None:
                    fid = self._frame_ids[key] = len(self._frame_ids) + 1
                    f = {"name": frame_name(fn, path, line), "category": path or "python"}
                    if parent is not None:
                        f["parent"] = str(parent)
                    self._frame_json.append(b'"%d":' % fid + orjson.dumps(f))
                parent = fid
            sid = self._stack_ids[frames] = parent
        return sid

    def _sf_table(self, c: Column) -> tuple[np.ndarray, np.ndarray]:
        """',"sf":<id>' per string of a column with stacks (empty where it names none), those used."""
        enc = [b""] * len(c.strings)
        for i in np.unique(c.values[c.mask()]).tolist():
            sid = self._sf(c.stacks[i])
            if sid is not None:
                enc[i] = b',"sf":%d' % sid
        return table(enc)

    def stack_samples(self, ts, tid, pid, stack, callstacks, frames, label=None, timer=False):
        n = len(ts)
        if n == 0:
            return
        uniq, inv = np.unique(np.asarray(stack), return_inverse=True)
        sf, text = [], []
        for s in uniq.tolist():
            sid = self._sf(tuple(frames[f] for f in callstacks[s]))
            sf.append(b"" if sid is None else b',"sf":%d' % sid)
            text.append(b',"args":{"py":' + orjson.dumps(label(s)) + b"}" if label is not None else b"")
        r = Rows(n).const(b'{"ph":"i","s":"t","ts":')
        self._us(r, np.asarray(ts).astype(np.int64, copy=False)).const(b',"pid":')
        r.decimal(np.asarray(pid).astype(np.int64)).const(b',"tid":').decimal(np.asarray(tid).astype(np.int64))
        r.const(b',"name":' + orjson.dumps(SAMPLE_NAME) + b',"cat":' + orjson.dumps(SAMPLE_CAT))
        codes = inv.ravel()
        r.gather(table(sf), codes).gather(table(text), codes).const(b"},\n")
        self._spool.write(r.build())
        self._n += n

    def stack_frames_json(self) -> bytes | None:
        """The stackFrames object, None when no event named a stack."""
        return b"{" + b",\n".join(self._frame_json) + b"}" if self._frame_json else None

    # -- bulk
    @staticmethod
    def _us(rows: Rows, ns: np.ndarray) -> Rows:
        """Nanoseconds as exact decimal microseconds ('123.456')."""
        ns = ns.astype(np.uint64)
        rows.decimal(ns // np.uint64(1000))
        frac = decimals(ns % np.uint64(1000) + np.uint64(1000))[0].copy()  # '1ddd': zero-padded digits
        frac[:, 0] = ord(".")
        return rows.piece(frac, np.full(ns.size, 4))

    @staticmethod
    def _json_strings(c: Column) -> tuple[np.ndarray, np.ndarray]:
        """JSON strings of a "str" column (a table), only those used."""
        enc = [b""] * len(c.strings)
        for i in np.unique(c.values[c.mask()]).tolist():
            enc[i] = orjson.dumps(c.strings[i])
        return table(enc)

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None):
        n = len(ts)
        if n == 0:
            return
        ts = np.asarray(ts).astype(np.int64, copy=False)
        dur = np.maximum(np.asarray(dur).astype(np.int64, copy=False), 0)
        tid = np.asarray(tid)
        if pid is None:
            threads, inv = np.unique(tid, return_inverse=True)
            pid = np.array([self._pid(t, None) for t in threads.tolist()], np.int64)[inv.ravel()]
        name_cat = []
        for field, v in ((b',"name":', name), (b',"cat":', cat)):
            if isinstance(v, Column):
                name_cat.append((field, table([orjson.dumps(s) for s in v.strings]), v.values))
            else:
                name_cat.append((field + orjson.dumps(v), None, None))
        strings = {id(c): self._json_strings(c) for c in args if c.kind == "str"}
        sfs = {id(c): self._sf_table(c) for c in args if c.stacks is not None}
        floats = {}
        for c in args:
            if c.kind == "float":  # JSON text of each distinct value, gathered per row
                u, inv = np.unique(c.values, return_inverse=True)
                floats[id(c)] = (table([orjson.dumps(v) for v in u.tolist()]), inv.ravel())
        out = []
        for idx, cols in groups_by_args(n, args):
            r = Rows(idx.size).const(b'{"ph":"X","ts":')
            self._us(r, ts[idx]).const(b',"dur":')
            self._us(r, dur[idx]).const(b',"pid":').decimal(np.asarray(pid)[idx].astype(np.int64))
            r.const(b',"tid":').decimal(tid[idx].astype(np.int64))
            for field, tab, codes in name_cat:
                r.const(field)
                if tab is not None:
                    r.gather(tab, codes[idx])
            for c in cols:
                if id(c) in sfs:
                    r.gather(sfs[id(c)], c.values[idx])
            for j, c in enumerate(cols):
                r.const((b',"args":{' if j == 0 else b",") + orjson.dumps(c.key) + b":")
                v = c.values[idx]
                if c.kind == "int":
                    r.decimal(v)
                elif c.kind == "hex":
                    r.const(b'"').hex(v).const(b'"')
                elif c.kind == "str":
                    r.gather(strings[id(c)], v)
                elif c.kind == "float":
                    tab, codes = floats[id(c)]
                    r.gather(tab, codes[idx])
                else:
                    raise ValueError(f"unknown column kind {c.kind!r}")
            out.append(r.const(b"}},\n" if cols else b"},\n").build())
        self._spool.write(b"".join(out))
        self._n += n
        # A flow's two ends are matched by (cat, name, id): one category for all of them, whatever
        # families the slices at its ends belong to.
        pid = np.asarray(pid).astype(np.int64)
        for ids, head in ((flow_out, b'{"ph":"s","id":'), (flow_in, b'{"ph":"f","bp":"e","id":')):
            if ids is None:
                continue
            for col in flow_columns(ids):
                rows = np.flatnonzero(col)
                if not rows.size:
                    continue
                r = Rows(rows.size).const(head).decimal(col[rows]).const(b',"ts":')
                self._us(r, ts[rows]).const(b',"pid":').decimal(pid[rows]).const(b',"tid":')
                r.decimal(tid[rows].astype(np.int64)).const(b',"name":"flow","cat":"flow"},\n')
                self._spool.write(r.build())
                self._n += rows.size

    # -- track groups: a pseudo process per group, a pseudo thread per track (and lane)
    def _group_pid(self, group: str) -> int:
        pid = self._groups.get(group)
        if pid is None:
            pid = self._groups[group] = JSON_GROUP_PID + len(self._groups)
            self._emit({"ph": "M", "name": "process_name", "pid": pid, "tid": pid, "args": {"name": group}})
            self._emit({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": pid,
                        "args": {"sort_index": 1 << 20 | len(self._groups)}})
        return pid

    def _group_tid(self, group: str, track: str, lane: int) -> tuple[int, int]:
        pid = self._group_pid(group)
        tid = self._group_tracks.get((group, track, lane))
        if tid is None:
            tid = self._group_tracks[(group, track, lane)] = JSON_GROUP_TID + len(self._group_tracks)
            self._emit({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": track}})
            self._emit({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                        "args": {"sort_index": len(self._group_tracks)}})
        return pid, tid

    def group_slices(self, group, track, ts, dur, name, cat, args=(), flow_out=None, flow_in=None, lane=0):
        n = len(ts)
        if n == 0:
            return
        pid, tid = self._group_tid(group, track, lane)
        self.slices(ts, dur, np.full(n, tid, np.int64), np.full(n, pid, np.int64), name, cat, args,
                    flow_out, flow_in)

    def group_counters(self, group, name, ts, values):
        pid = self._group_pid(group)
        for t, v in zip(np.asarray(ts).tolist(), np.asarray(values).tolist()):
            self._emit({"ph": "C", "ts": t / 1000, "pid": pid, "name": name, "args": {"value": v}})

    def counters(self, name, ts, values, pid=None):
        n = len(ts)
        values = np.asarray(values)
        if n == 0 or values.dtype.kind not in "iu":  # floats: shortest repr, per value
            return super().counters(name, ts, values, pid)
        r = Rows(n).const(b'{"ph":"C","ts":')
        self._us(r, np.asarray(ts).astype(np.int64, copy=False))
        self.used_system |= pid is None
        r.const(b',"pid":' + str(pid if pid is not None else JSON_SYSTEM_PID).encode() + b',"name":' + orjson.dumps(name)
                + b',"args":{"value":').decimal(values).const(b"}},\n")
        self._spool.write(r.build())
        self._n += n

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
