"""What every trace format implements, and what families hand it.

A format is a package beside this module (perfetto/, chrome/) with two
classes, the two sides of one conversion:
- a `TraceWriter`: the conversion loop (timeline.converters.convert) gives
  it the sched chunks, proc records and process snapshots, and closes the
  trace with finish();
- a `TrackSink` (the writer's `sink`): family converters (CUDA calls, ioctls,
  block I/O, counters, GPU work) describe what they want on the timeline
  through it: thread slices, instants, named async tracks, counters, flows
  and track groups.  A family converter is written once, for every format.

Bulk: `slices()` and `counters()` take whole numpy columns (a block of
calls at once, args as `Column`s, gathered with `ColumnSet`); a format
encodes every event with numpy (columns.py), one write per call.  The base
class falls back to one `slice()` / `counter()` per row, which is also the
reference the bulk encodings are tested against.

Arg values: int, float, bool or str.  Perfetto's trace_processor stores ints
as int64, so pass pointers and other values that may reach 2**63 as hex str
(a "hex" Column in bulk).
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass
class Column:
    """One slice argument (or the slice name) for every row of a bulk call.

    kind "int": `values` int64 or uint64 (uint64 >= 2**63 stay unsigned);
    "hex": uint64 shown as '0x...' strings (pointers, handles);
    "str": `values` are indices into `strings`.
    `present`: rows that have the argument (None: all of them).
    `stacks`: for a "str" column that names call stacks (the pystack family's
    `py` arg), per string its frames (function, file, line), innermost
    first; formats that know stacks attach them too (Chrome JSON: `sf`).
    """
    key: str
    kind: str
    values: np.ndarray
    strings: list | None = None
    present: np.ndarray | None = None
    stacks: list | None = None

    def pylist(self) -> list:
        """Per-row Python values, None where absent (the per-event path)."""
        if self.kind == "hex":
            vals = [f"{v:#x}" for v in self.values.tolist()]
        elif self.kind == "str":
            vals = [self.strings[i] for i in self.values.tolist()]
        else:
            vals = self.values.tolist()
        if self.present is not None:
            vals = [v if ok else None for v, ok in zip(vals, self.present.tolist())]
        return vals

    def mask(self) -> np.ndarray:
        return np.ones(self.values.size, bool) if self.present is None else self.present


class ColumnSet:
    """Collects argument columns for n rows, group of rows by group of rows.

    `put(key, kind, idx, values)` sets the argument of rows idx (a later put
    for the same rows replaces it); for "str", values index `strings`.  Ints
    given as uint64 and as int64 go to separate columns, so each keeps its
    meaning; a row has at most one of them.
    """

    def __init__(self, n: int):
        self.n = n
        self.cols: dict[tuple, Column] = {}
        self._same: dict[tuple[str, str], list[Column]] = {}  # (key, kind) -> its columns
        self._str_ids: dict[str, dict] = {}

    def put(self, key: str, kind: str, idx, values, strings: list | None = None) -> None:
        values = np.asarray(values)
        if kind == "str":
            ids = self._str_ids.setdefault(key, {})
            values = np.array([ids.setdefault(s, len(ids)) for s in strings], np.intp)[values]
            dtype = np.intp
        elif kind == "hex" or values.dtype == np.uint64:
            dtype = np.uint64
        else:
            dtype = np.int64
        c = self.cols.get((key, kind, dtype))
        if c is None:
            c = self.cols[(key, kind, dtype)] = Column(key, kind, np.zeros(self.n, dtype), None,
                                                       np.zeros(self.n, bool))
            self._same.setdefault((key, kind), []).append(c)
        c.values[idx] = values
        c.present[idx] = True
        for other in self._same[(key, kind)]:  # the int column of the other signedness loses these rows
            if other is not c:
                other.present[idx] = False

    def columns(self) -> list[Column]:
        for (key, kind, _), c in self.cols.items():
            if kind == "str":
                c.strings = list(self._str_ids[key])
        return list(self.cols.values())


def groups_by_args(n: int, args) -> list[tuple[np.ndarray, list[Column]]]:
    """Rows that have the same arguments, as (row indices, those columns).

    The bulk encoders build each group densely (no gaps where an argument is
    missing) and write the groups one after the other: rows do not keep
    their order, each row's event(s) stay together.
    """
    sparse = [c for c in args if c.present is not None and not c.present.all()]
    if not sparse:
        return [(np.arange(n), list(args))]
    code = np.zeros(n, np.int64)
    for i, c in enumerate(sparse):
        if i and i % 30 == 0:  # renumber (< n) to make room for more bits
            code = np.unique(code, return_inverse=True)[1].ravel()
        code = (code << 1) | c.present
    _, first, inv = np.unique(code, return_index=True, return_inverse=True)
    order = np.argsort(inv.ravel(), kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(inv.ravel()))]
    return [(order[a:b], [c for c in args if c.present is None or c.present[r0]])
            for a, b, r0 in zip(bounds[:-1].tolist(), bounds[1:].tolist(), first.tolist())]


def flow_columns(ids) -> list[np.ndarray]:
    """A flow id array (n,) or (n, k) -> k uint64 columns (0 = none): a slice may start several flows
    (a graph launch -> each kernel it ran)."""
    a = np.asarray(ids).astype("<u8", copy=False)
    return [a] if a.ndim == 1 else [a[:, j] for j in range(a.shape[1])]


def flow_ids(v) -> list[int]:
    """A per-row flow value (None, an int, or a sequence of ints; 0 = none) -> the ids."""
    if v is None:
        return []
    if isinstance(v, (list, tuple, np.ndarray)):
        return [int(x) for x in v if x]
    return [int(v)] if v else []


def frame_name(function: str, path: str, line: int) -> str:
    """How a Python frame is named in a trace: function (file:line)."""
    return f"{function} ({os.path.basename(path)}:{line})" if path else function


class TrackSink:
    """The interface family converters write to (perfetto.sink.PerfettoTrackSink,
    chrome.sink.ChromeTrackSink).

    - `slice` / `instant`: on thread tid's track, in process pid (None: the
      thread's own process);
    - `async_slice`: on a named track of its own, apart from the threads;
      overlapping slices go to extra lanes of the same name (`Lanes`);
    - `counter`: a counter named `name` of process pid (system-wide when None);
    - flows: `flow_out` on the source slice, `flow_in` on each destination.

    Besides threads, a sink has track groups: `group_slices(group, track, ...)`
    puts slices on a named track under a named group (GPU 0 -> GPU 0 · stream 7),
    shown apart from the processes (Perfetto: a top-level track with child
    tracks; Chrome JSON: a pseudo process per group, a pseudo thread per track);
    `group_counters` a counter under the group.
    """

    def slice(self, ts: int, dur: int, tid: int, pid: int | None, name: str, cat: str,
              args: dict | None = None, flow_out: int | None = None, flow_in: int | None = None) -> None:
        raise NotImplementedError

    def instant(self, ts: int, tid: int, pid: int | None, name: str, cat: str, args: dict | None = None) -> None:
        raise NotImplementedError

    def async_slice(self, track: str, ts: int, dur: int, name: str, cat: str, args: dict | None = None) -> None:
        raise NotImplementedError

    def counter(self, name: str, ts: int, value: float, pid: int | None = None) -> None:
        raise NotImplementedError

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        """Many thread slices at once.  ts, dur, tid, pid: integer arrays of n
        rows (pid may be None); name, cat: a str, or a "str" Column for one
        per row; args: Columns; flow_out / flow_in: uint64 arrays, 0 = none.
        Here: one slice() per row."""
        n = len(ts)
        names = name.pylist() if isinstance(name, Column) else itertools.repeat(name, n)
        cats = cat.pylist() if isinstance(cat, Column) else itertools.repeat(cat, n)
        cols = [(c.key, c.pylist()) for c in args]
        fo = np.asarray(flow_out).tolist() if flow_out is not None else [0] * n
        fi = np.asarray(flow_in).tolist() if flow_in is not None else [0] * n
        fo = [x if isinstance(x, list) else (x or None) for x in fo]
        pids = np.asarray(pid).tolist() if pid is not None else [None] * n
        for i, (t, d, th, p, nm, ct) in enumerate(zip(np.asarray(ts).tolist(), np.asarray(dur).tolist(),
                                                       np.asarray(tid).tolist(), pids, names, cats)):
            a = {k: v[i] for k, v in cols if v[i] is not None}
            self.slice(t, d, th, p, nm, ct, a, flow_out=fo[i], flow_in=fi[i] or None)

    def counters(self, name: str, ts, values, pid: int | None = None) -> None:
        """Many values of one counter (ts, values: arrays; ints stay ints)."""
        for t, v in zip(np.asarray(ts).tolist(), np.asarray(values).tolist()):
            self.counter(name, t, v, pid=pid)

    def group_slices(self, group: str, track: str, ts, dur, name, cat, args=(), flow_out=None, flow_in=None,
                     lane: int = 0) -> None:
        """Many slices on `track` under `group` (arguments as in `slices`).  Slices of one track must
        nest; `lane` > 0 puts them on another track of the same name (overlapping work)."""
        raise NotImplementedError

    def group_counters(self, group: str, name: str, ts, values) -> None:
        """Many values of counter `name` under `group`."""
        raise NotImplementedError

    def stack_samples(self, ts, tid, pid, stack, callstacks, frames, label=None, timer=False) -> None:
        """Call stack samples: sample i taken at ts[i] on thread tid[i] of
        process pid[i] (integer arrays) in callstacks[stack[i]], a sequence of
        indices into `frames` (innermost first); a frame is (function, file,
        line); lower indices are the stacks sampled more often (a sink may
        number them so: Perfetto's callstack iids, 1 byte under 128).
        label(callstack index): the stack as a short text, for formats
        that show it as an argument.  timer: the samples come from a
        sampling timer (their times need not be exact to the nanosecond).
        Perfetto: StreamingProfilePacket runs for timer samples, else
        PerfSample packets (per-thread sample tracks, flame graphs); Chrome
        JSON: instant events with `sf`; a format without stacks drops them."""

    def finish(self) -> None:
        pass


class Lanes:
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


@runtime_checkable
class TraceWriter(Protocol):
    """The conversion loop's side of a format: PerfettoWriter, ChromeJsonWriter."""
    sink: TrackSink     # where families write their tracks
    n_switch: int       # sched switches written (0 where a format does not count them)
    switch_bytes: int   # bytes of compact sched switch arrays (Perfetto; 0 elsewhere)

    def begin(self) -> None: ...
    def sched(self, chunks: list) -> None: ...
    def proc(self, recs: np.ndarray) -> None: ...
    def snapshot(self, meta: dict) -> None: ...
    def finish(self) -> None: ...
