"""cgroup_limits (sql/cgroup_limits.sql) as a partial computed at conversion.

The SQL is in map-reduce form: its map table _tl_cl_part holds, per counter track 'cgroup <cg>
<metric>', the largest value and the first time it was above 0, and a row of the trace's bounds.
Here the map rows are computed once over the whole recording (every sample seen once, as the one
trace holds them) and stored in the set's part; merge runs the SQL's own reduce on them in SQLite,
so the numbers are printed by the same printf. Bounded: one row per cgroup counter track.

The bounds (trace_bounds of the one trace: its first and last event of any kind) only print in the
throttling finding, as a duration with 2 decimals. They are not known exactly here: the set part
holds an interval for each end (the log's first record or an earlier event seen .. the earliest
event seen; the latest event start seen .. the log's end or a later event end seen: events the
converter writes past the collectors, were there any, would have to lie inside the log's span),
and merge answers only where the shortest and the longest duration print the same rows. No partial (the SQL runs) otherwise, with more than MAX_TRACKS cgroup
tracks, or without a sched tap to bound the start.
"""
from __future__ import annotations

import numpy as np

from ..catalog import BY_ID
from ._gpu import made_with
from ._reduce import reduced
from ._sched import SchedColumns

CHECK = "cgroup_limits"
VERSION = 1
MAX_TRACKS = 10_000
METRICS = ("cpu.nr_periods", "cpu.nr_throttled", "cpu.throttled_ms", "memory.events.high", "memory.events.max",
           "memory.failcnt", "memory.events.oom_kill", "memory.oom_kill")
COLUMNS = ["kind", "metric", "cg", "mx", "first_ts"]


class CgroupTracks:
    """Per counter track named 'cgroup ...': max value and first ts with a value > 0; and the extent
    of every event it is shown (a lower bound of the trace's span)."""

    def __init__(self):
        self.tracks: dict = {}   # (kind, owner, name) -> [mx, first positive ts or None]
        self.first = None        # earliest ts of any event seen
        self.last = None         # latest event start seen
        self.end = None          # latest event end seen (ts + dur)
        self.model = None
        self.log_start = None

    def _extent(self, ts, dur=None) -> None:
        if len(ts):
            lo, hi = int(np.min(ts)), int(np.max(ts))
            end = hi if dur is None else int(np.max(ts + np.maximum(dur, 0)))
            self.first = lo if self.first is None else min(self.first, lo)
            self.last = hi if self.last is None else max(self.last, hi)
            self.end = end if self.end is None else max(self.end, end)

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None):
        self._extent(np.asarray(ts, np.int64), np.asarray(dur, np.int64))

    def _one(self, ts, dur=0) -> None:  # one event: no array
        ts = int(ts)
        end = ts + max(int(dur), 0)
        self.first = ts if self.first is None or ts < self.first else self.first
        self.last = ts if self.last is None or ts > self.last else self.last
        self.end = end if self.end is None or end > self.end else self.end

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None):
        self._one(ts, dur)

    def group_slices(self, ts, dur, name, cat, args=(), flow_out=None, flow_in=None):
        self._extent(np.asarray(ts, np.int64), np.asarray(dur, np.int64))

    def async_slice(self, track, ts, dur, name, cat, args=None):
        self._one(ts, dur)

    def stack_samples(self, ts, tid, pid, stack, callstacks, frames, label=None, timer=False):
        self._extent(np.asarray(ts, np.int64))

    def instant(self, ts, tid, pid, name, cat, args=None):
        self._one(ts)

    def counters(self, name, ts, values, pid=None):
        self._add(("counter", pid, str(name)), ts, values)

    def group_counters(self, group, name, ts, values):
        self._add(("group", str(group), str(name)), ts, values)

    def _add(self, key, ts, values) -> None:
        ts = np.asarray(ts)
        self._extent(ts)
        if not key[2].startswith("cgroup ") or ts.size == 0:
            return
        v = np.asarray(values, np.float64)  # trace_processor reads every counter value as a double
        pos = ts[v > 0]
        first = int(pos.min()) if pos.size else None
        t = self.tracks.get(key)
        if t is None:
            if len(self.tracks) >= MAX_TRACKS:
                self.tracks[None] = None  # too many: no partial
                return
            self.tracks[key] = [float(v.max()), first]
            return
        t[0] = max(t[0], float(v.max()))
        if first is not None:
            t[1] = first if t[1] is None else min(t[1], first)


Collector = (CgroupTracks, SchedColumns)


def part(cols, starts) -> dict | None:
    tracks, sched = cols
    if None in tracks.tracks or not tracks.tracks or tracks.model is None:
        return None
    bounds = sched.start_bounds()
    if bounds is None or tracks.first is None:
        return None
    # every event seen lies inside the outer bounds; the inner ones are events the trace holds
    s_lo, s_hi = min(bounds[0], tracks.first), min(bounds[1], tracks.first)
    e_lo, e_hi = tracks.last, max(tracks.model.end_ts(), tracks.end)
    sw = sched.sched_slices()["ts"]
    if sw.size:
        e_lo, e_hi = max(e_lo, int(sw.max())), max(e_hi, int(sw.max()))
    if not (s_lo <= s_hi <= e_lo <= e_hi):
        return None
    rows = []
    for (_, _, name), (mx, first) in tracks.tracks.items():
        for m in METRICS:
            # the SQL's join: t.name glob 'cgroup * ' || metric
            if len(name) >= 8 + len(m) and name.endswith(" " + m):
                rows.append(["track", m, name[7:len(name) - 1 - len(m)], mx, first])
    p = BY_ID[CHECK].defaults()
    return {"set": {"version": VERSION, "params": p, "rows": rows, "start": [s_lo, s_hi], "end": [e_lo, e_hi]},
            "chunks": [{} for _ in starts]}


def merge(set_part: dict, chunk_parts: list, params: dict):
    if not made_with(set_part, VERSION, params):
        return None
    rows = [tuple(r) for r in set_part["rows"]]
    (s_lo, s_hi), (e_lo, e_hi) = set_part["start"], set_part["end"]
    # the shortest and the longest span the one trace can have: one answer only if both print alike
    short = reduced(CHECK, params, COLUMNS, rows + [("bounds", None, None, e_lo, s_hi)])
    long = reduced(CHECK, params, COLUMNS, rows + [("bounds", None, None, e_hi, s_lo)])
    return short if short == long else None
