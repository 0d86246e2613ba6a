"""Trace sets: one recording written as numbered complete Perfetto traces, split in time.

    NAME.tlset/
      index.json          {"format": "timeline-trace-set", "version": 1, "source": ..., "chunks": [...],
                           "data": {check data name: held?}, "partials": {...}}
      chunk-0001.pftrace  the first time window, a trace of its own
      chunk-0002.pftrace  ...

Why: trace_processor (the wasm engine of `timeline check` and of the browser
UI) needs ~15 times a trace's size in memory and struggles from ~10 M events;
an hour of a multi-GPU job holds hundreds of millions.  A chunk of a few
million events loads anywhere, and checks can run chunk by chunk.

How: pass 1 (model.scan) is shared; pass 2 runs once, into one PerfettoWriter
per chunk.  The writers sit behind `SplitWriter` (sched, proc, snapshots:
routed by timestamp) and `SplitSink` (the families' TrackSink: each slice,
counter, instant routed to the chunk of its time), so memory is that of the
unsplit converter plus each chunk's writer state (interning tables, a write
buffer), and the speed is the same: no event is read or encoded twice.

What keeps each chunk whole:
- every chunk names the processes and threads alive in it (a process_tree
  at its start), repeats the header packets (clock snapshot, system info,
  metadata) and declares every named track and track group any chunk has;
- each CPU's running task is carried over: two synthetic switches at the
  chunk's start (trace_processor drops a CPU's first compact switch);
- a slice that crosses a boundary is cut: one piece per chunk it overlaps,
  each with args timeline_cut = "end" (continues in a later chunk), "start"
  (began in an earlier one) or "both", and timeline_span_id, the same int in
  every piece of that slice.  Its flows stay on the piece holding its begin;
- a flow whose ends land in different chunks gets a marker slice at the
  edge of each, linked to the end that chunk has (trace_set_flows.py);
- a counter's last value is repeated at the start of each later chunk;
- drop statistics (ftrace_stats, the drop counters) are in the last chunk only.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import re

import numpy as np

from ..errors import UserError
from ..registry import MAIN_ACTIVITY
from .interface import Column, TrackSink, flow_ids
from .model import IDLE_TID, OUTSIDE_TID, STATE_RUNNABLE, DEFAULT_PRIO, CpuSched, LogModel
from .trace_set_flows import IN, OUT, FlowEnds, write_markers

FORMAT = "timeline-trace-set"
VERSION = 1
SUFFIX = ".tlset"
INDEX = "index.json"
DATA = "data"  # the index's key: which of the checks' data the set holds (data_seen)
CHUNK_NAME = "chunk-{:04d}.pftrace"
CHUNK_RE = re.compile(r"chunk-\d{4,}\.pftrace")
# Above this many raw records a conversion writes a trace set unless told not to
# (--split off): the wasm trace_processor needs several GB from ~10 M events.
AUTO_SPLIT_ABOVE = 10_000_000
AUTO_CHUNK_EVENTS = 4_000_000
MAX_CHUNKS = 500  # each chunk's file stays open until the end (descriptors, buffers)
_WRITE_BUFFER = 256 << 10  # per chunk: all chunks are open at once
CUT_KINDS = ["start", "end", "both"]  # timeline_cut values, in this order in the "str" Column


@dataclasses.dataclass(frozen=True)
class SplitSpec:
    """--split: by duration (ns) or by events per chunk; `auto` only above AUTO_SPLIT_ABOVE."""
    duration_ns: int | None = None
    events: int | None = None
    auto: bool = False

    def __str__(self) -> str:
        if self.auto:
            return "auto"
        return f"{self.duration_ns / 1e9:g}s" if self.duration_ns else f"{self.events}ev"


AUTO = SplitSpec(events=AUTO_CHUNK_EVENTS, auto=True)
_UNITS = {"ms": 1e6, "s": 1e9, "m": 60e9, "min": 60e9, "h": 3600e9}
_COUNT = {"": 1, "k": 1e3, "M": 1e6}


def parse_split(value: str) -> SplitSpec | None:
    """`5m`, `90s`, `1.5h`, `500ms` (a duration), `2000000ev`, `2Mev`, `500kev` (events per chunk),
    `auto` (split only a big recording) or `off` (None).  Raises ValueError with a one-line reason."""
    v = str(value).strip()
    if v in ("off", "none", "no"):
        return None
    if v == "auto":
        return AUTO
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kM]?)ev(?:ents)?", v)
    if m:
        n = int(float(m.group(1)) * _COUNT[m.group(2)])
        if n < 1000:
            raise ValueError(f"{value!r}: a chunk holds at least 1000 events")
        return SplitSpec(events=n)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|min|m|h)?", v)
    if m:
        ns = int(float(m.group(1)) * _UNITS[m.group(2) or "s"])
        if ns < 1_000_000:
            raise ValueError(f"{value!r}: a chunk spans at least 1 ms")
        return SplitSpec(duration_ns=ns)
    raise ValueError(f"{value!r}: expected a duration (5m, 90s, 1.5h) or events per chunk (2000000ev, 2Mev), "
                     "auto or off")


def set_path(out_path: str) -> str:
    """The trace set directory for an output name: run.pftrace -> run.tlset."""
    p = out_path.rstrip("/")
    if p.endswith(SUFFIX):
        return p
    base, ext = os.path.splitext(p)
    return (base if ext in (".pftrace", ".perfetto-trace", ".json", ".gz") else p) + SUFFIX


def is_trace_set(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, INDEX))


# ------------------------------------------------------------------ plan

def set_start(m: LogModel) -> int:
    """Where the first chunk starts: the first record of activity.  Process records kept from before
    it (a --ring dump's: the names of processes started before its window) go to the first chunk
    rather than make an empty window of their own."""
    start = m.start_ts()
    if m.activity_ts is not None and start < m.activity_ts <= m.end_ts():
        return m.activity_ts
    return start


def plan(m: LogModel, spec: SplitSpec | None) -> np.ndarray | None:
    """Chunk start times (ns, ascending; the first is the log's start), or None: one trace."""
    if spec is None or m.first_ts is None:
        return None
    total = sum(n for _, _, n in m.block_spans) + m.n_proc
    if spec.auto and total <= AUTO_SPLIT_ABOVE:
        return None
    start, end = set_start(m), m.end_ts() + 1
    if spec.duration_ns:
        n = max(1, math.ceil((end - start) / spec.duration_ns))
        if n > MAX_CHUNKS:
            raise ValueError(f"--split {spec}: {n} chunks; at most {MAX_CHUNKS}")
        return start + spec.duration_ns * np.arange(n, dtype=np.int64)
    n = max(1, math.ceil(total / spec.events))
    if n > MAX_CHUNKS:
        raise ValueError(f"--split {spec}: {n} chunks; at most {MAX_CHUNKS}")
    if n == 1:
        return np.array([start], np.int64)
    # Where the records lie: each ring block's records counted at its middle
    # (a block is one drain, well under a chunk), on a 1 ms or finer grid.
    spans = np.array(m.block_spans, np.int64).reshape(-1, 3)
    bins = int(min(1 << 22, max(4096, (end - start) // 1_000_000)))
    width = max(1, -(-(end - start) // bins))
    mid = (spans[:, 0] // 2 + spans[:, 1] // 2 - start) // width
    counts = np.bincount(np.clip(mid, 0, bins - 1), weights=spans[:, 2], minlength=bins)
    cum = np.cumsum(counts)
    cuts = np.searchsorted(cum, cum[-1] * np.arange(1, n) / n, side="left") + 1  # bins before each cut
    starts = np.unique(np.r_[start, start + cuts.astype(np.int64) * width])
    return starts[starts < end]


# ------------------------------------------------------------------ writing

@dataclasses.dataclass
class ChunkWindow:
    """What a chunk's PerfettoWriter knows of its place in the set."""
    index: int   # 0-based
    count: int
    start: int   # ns, inclusive
    end: int     # ns, exclusive (the next chunk's start; the log's end + 1 for the last)


class SplitSink(TrackSink):
    """Routes the families' events to each chunk's PerfettoTrackSink by time,
    cutting slices that cross a boundary (see the module doc)."""

    def __init__(self, starts: np.ndarray, sinks: list, lifetime=None):
        self.starts = np.asarray(starts, np.int64)
        self.sinks = sinks
        self.n = len(sinks)
        self.events = np.zeros(self.n, np.int64)
        self.family_events: list[dict] = [{} for _ in range(self.n)]  # per chunk: family -> events
        self.family: str | None = None  # who writes now (SplitWriter sets it)
        self._span_ids = itertools.count(1)
        self._last: dict[tuple, tuple] = {}  # counter -> (chunk, value, write(k, ts, values), pid)
        self._lifetime = lifetime or (lambda kind, ident: (None, None))
        self.flows = FlowEnds()
        # what the checks' data tests (timeline.family.CheckData.seen) read, for the index's "data"
        self.categories: set[str] = set()
        self.counter_names: set[str] = set()
        self.samples = False
        self.taps: list = []  # checks' partial collectors (timeline.checks.partials): each sees what the sink
        #                       writes through a method of the same name, where it has one (slices, group slices,
        #                       instants, counters, stack samples...), and SplitWriter's sched and proc records

    # -- routing
    def chunk_of(self, ts) -> np.ndarray:
        return np.clip(np.searchsorted(self.starts, np.asarray(ts, np.int64), "right") - 1, 0, self.n - 1)

    def _note(self, k: int, count: int = 1, family: str | None = None) -> None:
        """count events written to chunk k, by `family` (default: the one writing now)."""
        self.events[k] += count
        fam = family or self.family
        if fam:
            self.family_events[k][fam] = self.family_events[k].get(fam, 0) + int(count)

    def _pieces(self, ts, dur):
        """Per chunk: (k, rows, piece ts, piece dur, extra arg Columns, first) for slices ts..ts+dur;
        `first`: the piece holds the slice's begin (its flows go there)."""
        ts = np.asarray(ts).astype(np.int64, copy=False)
        dur = np.maximum(np.asarray(dur).astype(np.int64, copy=False), 0)
        end = ts + dur
        k0 = self.chunk_of(ts)
        k1 = np.maximum(k0, self.chunk_of(np.maximum(end - 1, ts)))
        cross = k0 != k1
        if not cross.any():
            lo, hi = int(k0.min()), int(k0.max())
            if lo == hi:
                self._note(lo, ts.size)
                yield lo, None, ts, dur, [], None
                return
        whole = np.flatnonzero(~cross)
        for k in np.unique(k0[whole]).tolist():
            rows = whole[k0[whole] == k]
            self._note(k, rows.size)
            yield k, rows, ts[rows], dur[rows], [], None
        rows = np.flatnonzero(cross)
        if not rows.size:
            return
        reps = (k1[rows] - k0[rows] + 1)
        row = np.repeat(rows, reps)
        step = np.arange(row.size) - np.repeat(np.cumsum(reps) - reps, reps)
        k = k0[row] + step
        first, last = k == k0[row], k == k1[row]
        p_ts = np.where(first, ts[row], self.starts[k])
        p_end = np.where(last, end[row], self.starts[np.minimum(k + 1, self.n - 1)])
        cut = np.where(first, 1, np.where(last, 0, 2))  # CUT_KINDS: end, start, both
        base = next(self._span_ids)
        self._span_ids = itertools.count(base + rows.size)
        span = base + np.repeat(np.arange(rows.size), reps)
        extra = [Column("timeline_cut", "str", cut, list(CUT_KINDS)), Column("timeline_span_id", "int", span)]
        for j in np.unique(k).tolist():
            sel = np.flatnonzero(k == j)
            self._note(j, sel.size)
            yield j, row[sel], p_ts[sel], p_end[sel] - p_ts[sel], [_rows(c, sel) for c in extra], first[sel]

    # -- TrackSink
    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None):
        self._category(cat)
        self._tap(SplitSink.slice, ts, dur, tid, pid, name, cat, args, flow_out, flow_in)
        end = ts + max(dur, 0)
        k0 = int(self.chunk_of(ts))
        k1 = max(k0, int(self.chunk_of(max(end - 1, ts))))
        if flow_out or flow_in:
            self.flows.add(np.array([flow_ids_row(flow_out)], np.uint64).reshape(1, -1), OUT, k0, tid, pid)
            self.flows.add(np.array([flow_ids_row(flow_in)], np.uint64).reshape(1, -1), IN, k0, tid, pid)
        if k0 == k1:
            self._note(k0)
            self.sinks[k0].slice(ts, dur, tid, pid, name, cat, args, flow_out, flow_in)
            return
        span = next(self._span_ids)
        for k in range(k0, k1 + 1):
            a = ts if k == k0 else int(self.starts[k])
            b = end if k == k1 else int(self.starts[k + 1])
            cut = "end" if k == k0 else ("start" if k == k1 else "both")
            self._note(k)
            self.sinks[k].slice(a, b - a, tid, pid, name, cat, {**(args or {}), "timeline_cut": cut,
                                                               "timeline_span_id": span},
                                flow_out if k == k0 else None, flow_in if k == k0 else None)

    def async_slice(self, track, ts, dur, name, cat, args=None):
        self._category(cat)
        self._tap(SplitSink.async_slice, track, ts, dur, name, cat, args)
        for k, _, pts, pdur, extra, _ in self._pieces([ts], [dur]):
            a = dict(args or {})
            for c in extra:
                a[c.key] = c.pylist()[0]
            self.sinks[k].async_slice(track, int(pts[0]), int(pdur[0]), name, cat, a)

    def _category(self, cat) -> None:
        if isinstance(cat, Column):
            self.categories.update(str(x) for x in cat.strings)  # every string it may hold: never "absent" wrongly
        elif cat is not None:
            self.categories.add(str(cat))

    def _tap(self, method, *a, **kw) -> None:
        """Hand the collectors that have a method of the name of this sink's `method` its arguments."""
        for tap in self.taps:
            if hasattr(tap, method.__name__):
                getattr(tap, method.__name__)(*a, **kw)

    def instant(self, ts, tid, pid, name, cat, args=None):
        self._category(cat)
        self._tap(SplitSink.instant, ts, tid, pid, name, cat, args)
        k = int(self.chunk_of(ts))
        self._note(k)
        self.sinks[k].instant(ts, tid, pid, name, cat, args)

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None):
        self._category(cat)
        if len(ts) == 0:
            return
        tid = np.asarray(tid)
        pid = None if pid is None else np.asarray(pid)
        self._tap(SplitSink.slices, ts, dur, tid, pid, name, cat, args, flow_out, flow_in)
        if flow_out is not None or flow_in is not None:
            k0 = self.chunk_of(ts)
            self.flows.add(flow_out, OUT, k0, tid, pid)
            self.flows.add(flow_in, IN, k0, tid, pid)
        for k, rows, pts, pdur, extra, first in self._pieces(ts, dur):
            if rows is None:
                self.sinks[k].slices(pts, pdur, tid, pid, name, cat, args, flow_out, flow_in)
                continue
            self.sinks[k].slices(pts, pdur, tid[rows], None if pid is None else pid[rows], _rows(name, rows),
                                 _rows(cat, rows), [_rows(c, rows) for c in args] + extra,
                                 _flows(flow_out, rows, first), _flows(flow_in, rows, first))

    def group_slices(self, group, track, ts, dur, name, cat, args=(), flow_out=None, flow_in=None, lane=0):
        self._category(cat)
        if len(ts) == 0:
            return
        self._tap(SplitSink.group_slices, ts, dur, name, cat, args, flow_out, flow_in)
        if flow_out is not None or flow_in is not None:
            k0, where = self.chunk_of(ts), self.flows.group_track(group, track, lane)
            self.flows.add(flow_out, OUT, k0, track=where)
            self.flows.add(flow_in, IN, k0, track=where)
        for k, rows, pts, pdur, extra, first in self._pieces(ts, dur):
            if rows is None:
                self.sinks[k].group_slices(group, track, pts, pdur, name, cat, args, flow_out, flow_in, lane)
                continue
            self.sinks[k].group_slices(group, track, pts, pdur, _rows(name, rows), _rows(cat, rows),
                                       [_rows(c, rows) for c in args] + extra,
                                       _flows(flow_out, rows, first), _flows(flow_in, rows, first), lane)

    def counter(self, name, ts, value, pid=None):
        self.counters(name, np.array([ts], np.int64), [value], pid)

    def counters(self, name, ts, values, pid=None):
        self.counter_names.add(str(name))
        self._tap(SplitSink.counters, name, ts, values, pid)

        def write(k, t, v):
            self.sinks[k].counters(name, t, v, pid)
        self._counter_rows(("counter", name, pid), ts, values, write, pid)

    def group_counters(self, group, name, ts, values):
        self.counter_names.add(str(name))
        self._tap(SplitSink.group_counters, group, name, ts, values)

        def write(k, t, v):
            self.sinks[k].group_counters(group, name, t, v)
        self._counter_rows(("gcounter", group, name), ts, values, write, None)

    def _counter_rows(self, key, ts, values, write, pid) -> None:
        ts = np.asarray(ts).astype(np.int64, copy=False)
        values = np.asarray(values)
        if ts.size == 0:
            return
        k = self.chunk_of(ts)
        prev = self._last.get(key)  # (chunk, value, write, pid) of the latest sample so far
        for c in np.unique(k).tolist():
            rows = np.flatnonzero(k == c)
            if prev is not None and prev[0] < c:  # the value held since then, at the start of each chunk
                first = int(ts[rows].min())
                self._carry(prev, c if first > int(self.starts[c]) else c - 1)
            self._note(c, rows.size)
            write(c, ts[rows], values[rows])
            if prev is None or prev[0] <= c:
                prev = (c, values[rows[int(np.argmax(ts[rows]))]], write, pid)
        self._last[key] = prev

    def _carry(self, last, upto: int) -> None:
        """The value `last` holds at the start of each chunk after its own, up to chunk `upto`."""
        k, value, write, pid = last
        for j in range(k + 1, upto + 1):
            t = int(self.starts[j])
            if pid is not None:
                start, end = self._lifetime("process", pid)
                if (end is not None and end <= t) or (start is not None and start > t):
                    continue  # the process is not alive then: no ghost copy of it
            self._note(j)
            write(j, np.array([t], np.int64), np.array([value]))

    def stack_samples(self, ts, tid, pid, stack, callstacks, frames, label=None, timer=False):
        self.samples = self.samples or np.asarray(ts).size > 0
        self._tap(SplitSink.stack_samples, ts, tid, pid, stack, callstacks, frames, label=label, timer=timer)
        ts = np.asarray(ts)
        k = self.chunk_of(ts)
        for c in np.unique(k).tolist():
            r = np.flatnonzero(k == c)
            self._note(c, r.size)
            self.sinks[c].stack_samples(ts[r], np.asarray(tid)[r], np.asarray(pid)[r], np.asarray(stack)[r],
                                        callstacks, frames, label=label, timer=timer)

    def finish(self) -> None:
        for last in self._last.values():
            self._carry(last, self.n - 1)
        names = [CHUNK_NAME.format(i + 1) for i in range(self.n)]
        self.events += write_markers(self.flows, self.sinks, self.starts, names, self._lifetime)
        self._share_tracks()

    def _share_tracks(self) -> None:
        """Every chunk declares every named track and track group any chunk has (empty where it has no
        events), so each chunk shows the same layout."""
        keys = dict.fromkeys(key for s in self.sinks for key in s._uuids)
        for s in self.sinks:
            for key in keys:
                if key in s._uuids:
                    continue
                if key[0] == "group":
                    s._group_track(key[1])
                elif key[0] == "gtrack":
                    s._group_track(*key[1:])
                elif key[0] == "async":
                    s._track(key, lambda d, name=key[1]: setattr(d, "name", name), None)


def flow_ids_row(v) -> list[int]:
    """One slice's flow value (None, an int, or ints) as a list, [0] for none."""
    return flow_ids(v) or [0]


def _rows(v, rows):
    """A name/cat/arg (str or Column) for these rows."""
    if not isinstance(v, Column):
        return v
    return Column(v.key, v.kind, v.values[rows], v.strings, None if v.present is None else v.present[rows])


def _flows(ids, rows, first):
    """Flow ids for these rows, kept only on the piece holding each slice's begin."""
    if ids is None:
        return None
    a = np.asarray(ids)[rows]
    if first is None:
        return a
    a = a.copy()
    a[~first] = 0
    return a


class SplitWriter:
    """The TraceWriter the conversion loop sees: routes sched, proc and
    snapshots to the chunks' PerfettoWriters by time; families go to `sink`."""

    def __init__(self, files: list, m: LogModel, starts: np.ndarray):
        from .perfetto.writer import PerfettoWriter

        self.m = m
        self.starts = np.asarray(starts, np.int64)
        n = len(files)
        ends = np.r_[self.starts[1:], m.end_ts() + 1]
        self.windows = [ChunkWindow(i, n, int(s), int(e)) for i, (s, e) in enumerate(zip(self.starts, ends))]
        self.writers = [PerfettoWriter(f, m, w) for f, w in zip(files, self.windows)]
        leaders: dict = {}
        for w in self.writers:  # a leader that exits early is freed when its group dies, in whichever chunk
            w._early_leaders = leaders
        self.sink = SplitSink(self.starts, [w.sink for w in self.writers], m.lifetime)
        self._cpu_at: dict[int, int] = {}   # cpu -> the last chunk its sched went to
        self._running: dict[int, int] = {}  # cpu -> the task it last switched to

    @property
    def n_switch(self) -> int:
        return sum(w.n_switch for w in self.writers)

    @property
    def switch_bytes(self) -> int:
        return sum(w.switch_bytes for w in self.writers)

    def begin(self) -> None:
        for w in self.writers:
            w.begin()

    def sched(self, chunks: list[CpuSched]) -> None:
        for tap in self.sink.taps:  # as the one trace would carry them: before any chunk's carried switches
            if hasattr(tap, "sched"):
                tap.sched(chunks)
        for c in chunks:
            ks = self.sink.chunk_of(np.r_[c.sw_ts, c.wk_ts])
            for k in np.unique(ks).tolist():
                lo, hi = int(self.starts[k]), (int(self.starts[k + 1]) if k + 1 < len(self.starts) else None)
                sw = _window(c.sw_ts, lo if k else None, hi)
                wk = _window(c.wk_ts, lo if k else None, hi)
                part = CpuSched(c.cpu, *(a[sw] for a in (c.sw_ts, c.sw_prev, c.sw_next, c.sw_state, c.sw_prio)),
                                *(a[wk] for a in (c.wk_ts, c.wk_waker, c.wk_woken, c.wk_cpu, c.wk_prio)))
                self._carry_cpu(c.cpu, k)
                self.sink._note(k, part.sw_ts.size + part.wk_ts.size, "sched")
                self.writers[k].sched([part])
                if part.sw_next.size:
                    self._running[c.cpu] = int(part.sw_next[-1])

    def _carry_cpu(self, cpu: int, k: int) -> None:
        """Before cpu's sched goes to chunk k: the task running on it ends at each chunk's end (a switch to
        idle there) and runs again from the next one's start (two switches there: the first one, which
        trace_processor drops, then one from idle to that task), so every chunk shows who ran when."""
        was = self._cpu_at.get(cpu)
        self._cpu_at[cpu] = k if was is None else max(k, was)
        if was is None or was >= k or cpu not in self._running:
            return
        task = self._running[cpu]
        for j in range(was, k + 1):
            if j > was:
                t = int(self.starts[j])
                self.writers[j].sched([_switches(cpu, [t, t], [OUTSIDE_TID, IDLE_TID], [IDLE_TID, task])])
            if j < k and task != IDLE_TID:
                t = int(self.starts[j + 1])
                self.writers[j].sched([_switches(cpu, [t], [task], [IDLE_TID])])

    def proc(self, recs: np.ndarray) -> None:
        for tap in self.sink.taps:
            if hasattr(tap, "proc"):
                tap.proc(recs)
        k = self.sink.chunk_of(recs["ts"])
        for c in np.unique(k).tolist():
            part = recs[k == c]
            self.sink._note(c, part.size, "proc")
            self.writers[c].proc(part)

    def snapshot(self, meta: dict) -> None:
        self.writers[int(self.sink.chunk_of(int(meta.get("ts") or self.m.start_ts())))].snapshot(meta)

    def finish(self) -> None:
        for cpu in list(self._cpu_at):  # what ran last on each CPU, on into the chunks after
            self._carry_cpu(cpu, len(self.writers) - 1)
        self.sink.finish()
        for w in self.writers:
            w.finish()


def _switches(cpu: int, ts: list, prev: list, nxt: list) -> CpuSched:
    """Synthetic switches (state R: the task was still runnable) and no wakings."""
    n, empty = len(ts), np.zeros(0, np.int64)
    return CpuSched(cpu, np.array(ts, np.int64), np.array(prev, np.int64), np.array(nxt, np.int64),
                    np.full(n, STATE_RUNNABLE, np.int64), np.full(n, DEFAULT_PRIO, np.int64),
                    empty, empty, empty, empty, empty, n)


def _window(ts: np.ndarray, lo: int | None, hi: int | None) -> slice:
    """The index range of sorted ts in [lo, hi) (None: unbounded)."""
    a = 0 if lo is None else int(np.searchsorted(ts, lo, "left"))
    b = ts.size if hi is None else int(np.searchsorted(ts, hi, "left"))
    return slice(a, b)


def write(m: LogModel, norm, out_dir: str, starts: np.ndarray, progress, size: int, total: int,
          user=None, source: str = "") -> tuple[int, list[dict], int]:
    """Pass 2 into a trace set at out_dir; returns (raw records converted, the index's chunks, bytes)."""
    from ..checks import partials
    from ..safe_output import OutputDir
    from . import second_pass

    n = len(starts)
    with OutputDir(out_dir, user) as d:
        files = []
        try:
            for i in range(n):
                files.append(os.fdopen(d.create(CHUNK_NAME.format(i + 1)), "wb", buffering=_WRITE_BUFFER))
            w = SplitWriter(files, m, starts)
            taps = partial_collectors(m)
            w.sink.taps = partials.instances(taps)  # a shared collector is fed once

            def on_family(fam):
                w.sink.family = None if fam is None else _family_name(fam)
            events = second_pass(m, norm, w, progress, size, total, on_family=on_family)
            for f in files:
                f.close()
        finally:
            for f in files:
                if not f.closed:
                    f.close()
        sizes = [cw.out_bytes for cw in w.writers]
        chunks = index_chunks(m, w, sizes)
        doc = {"format": FORMAT, "version": VERSION, "source": source, "chunks": chunks,
               DATA: data_seen(w.sink)}
        add_partials(doc, taps, starts)
        body = json.dumps(doc, indent=1).encode()
        with os.fdopen(d.create(INDEX), "wb") as f:
            f.write(body)
    return events, chunks, sum(sizes) + len(body)


def data_seen(sink: SplitSink) -> dict:
    """The checks' data (timeline.family.CheckData) a set holds, as the index's "data": name -> bool,
    for those the converter can tell (timeline check SET then says "not recorded" without a chunk)."""
    from ..registry import CHECK_DATA

    out = {}
    for d in CHECK_DATA:
        seen = d.seen(sink.categories, sink.counter_names, sink.samples)
        if seen is not None:
            out[d.name] = bool(seen)
    return out


def partial_collectors(m: LogModel) -> dict:
    """check id -> the collector of its partial (timeline.checks.partials), fed pass 2's slices."""
    from ..checks import partials

    out = partials.collectors()
    for c in partials.instances(out):
        c.pid_of = m.thread_tgid
        c.log_start = m.start_ts()  # the one trace's first record (gpu_breakdown's "from +x s")
        if hasattr(c, "model"):
            c.model = m  # thread names and processes, as the trace names them
    return out


def add_partials(doc: dict, taps: dict, starts: np.ndarray) -> None:
    """Each check's partial into the index: the set's part at the top, each chunk's beside it.
    A collector that declines (None) adds nothing: that check runs through trace_processor."""
    from ..checks import partials

    for cid, tap in taps.items():
        part = partials.module(cid).part(tap, starts)
        if part is None or len(json.dumps(part)) > partials.MAX_BYTES:
            continue  # (long kernel names by the thousand: the index must stay readable, MAX_INDEX_BYTES)
        doc.setdefault(partials.PARTIALS, {})[cid] = part["set"]
        for chunk, p in zip(doc["chunks"], part["chunks"]):
            chunk.setdefault(partials.PARTIALS, {})[cid] = p


def _family_name(fam) -> str:
    """A family's name from its converter's package (timeline.cuda.converter -> cuda)."""
    parts = type(fam).__module__.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "timeline" else type(fam).__name__


def index_chunks(m: LogModel, w: SplitWriter, sizes: list[int]) -> list[dict]:
    host = (m.header.get("uname") or {}).get("nodename")
    ranks = {p.ranks.get("rank") for p in m.processes.values() if p.ranks.get("rank") is not None}
    rank = ranks.pop() if len(ranks) == 1 else None
    out = []
    for i, win in enumerate(w.windows):
        out.append({"file": CHUNK_NAME.format(i + 1), "start_ns": win.start, "end_ns": win.end,
                    "bytes": int(sizes[i]), "events": int(w.sink.events[i]),
                    "families": sorted(w.sink.family_events[i]), "machine": str(host) if host else None,
                    "rank": rank, "switches": w.writers[i].n_switch,
                    "family_events": dict(sorted(w.sink.family_events[i].items()))})
    return out


# ------------------------------------------------------------------ reading

def read_index(path: str, user=None) -> dict:
    """A trace set's index.json, checked; raises UserError (one line)."""
    from ..safe_input import open_input

    name = os.path.join(path, INDEX)
    try:
        fd = open_input(name, user)
    except OSError as e:
        raise UserError(f"cannot read {name}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "rb") as f:
            idx = json.loads(f.read(16 << 20))
    except (ValueError, OSError):
        raise UserError(f"{name} is not a trace set index (not JSON)") from None
    chunks = idx.get("chunks") if isinstance(idx, dict) else None
    if idx.get("format") != FORMAT or not isinstance(chunks, list) or not chunks:
        raise UserError(f"{name} is not a timeline trace set index")
    for c in chunks:
        if (not isinstance(c, dict) or not isinstance(c.get("file"), str) or not CHUNK_RE.fullmatch(c["file"])
                or type(c.get("start_ns")) is not int or type(c.get("end_ns")) is not int):
            raise UserError(f"{name}: a chunk entry is malformed")
    return idx


def chunk_at(idx: dict, seconds: float) -> int:
    """The chunk holding `seconds` after the set's start (clamped to the first/last)."""
    chunks = idx["chunks"]
    t = chunks[0]["start_ns"] + int(seconds * 1e9)
    starts = [c["start_ns"] for c in chunks]
    return max(0, min(len(chunks) - 1, int(np.searchsorted(starts, t, "right")) - 1))


def main_chunk(idx: dict) -> int:
    """The first chunk with the main activity: the first with at least half the events of the
    busiest chunk in the MAIN_ACTIVITY families (CUDA, GPU), or where no chunk has any, in all events."""
    chunks = idx["chunks"]

    def main(c) -> int:
        fe = c.get("family_events") if isinstance(c.get("family_events"), dict) else {}
        return sum(int(v) for k, v in fe.items() if k in MAIN_ACTIVITY and isinstance(v, int))
    score = [main(c) for c in chunks]
    if not any(score):
        score = [int(c.get("events") or 0) if isinstance(c.get("events"), int) else 0 for c in chunks]
    most = max(score)
    return next(i for i, v in enumerate(score) if v * 2 >= most)
