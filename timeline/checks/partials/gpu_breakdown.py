"""gpu_breakdown (sql/gpu_breakdown.sql) as a partial computed at conversion.

Its inputs are _gpu.py's: per device, the steady state (tl_gpu_window) and its GPU work, each row a
compute kernel, a communication kernel (NCCL's, named as the prelude's _tl_gpu.comm says) or a copy /
memset. The prelude's tl_gpu_time sums its elementary segments (_tl_gpu_seg) over the steady state:
here the same times are unions of intervals (timeline.gpu.intervals.merge) clipped to the window,
exact in ns: compute = |compute kernels|, comm_only = |compute or comm| - compute, copy_only =
busy - |compute or comm|, busy = |all work|. All of them are over the whole recording, so the partial
is the set's part only: per device the window's start and span and those four times (6 integers),
and the recording's start (the finding's "from +x s", from trace_start(): the set's start, the log's
first record; where the set starts later, at its first activity, there is no partial). Each chunk's
part is empty.

The per-step row: the steps are the main thread's top-level NVTX ranges (none of its NVTX ranges
encloses them) of the name it repeats 3+ times with the most total time, numbered by start; per step
and device, idle = 1 - |the device's work (all of it, not only the steady state) within the step| /
the step's duration, the union of intervals the SQL's cumulative busy time amounts to. The main
thread is the prelude's first rule only: the recorder's marker (the longest one; ties to the
earliest, then the lowest tid: _gpu.marked_main). Where the SQL would reach for another rule (no
marker) or break a tie by trace_processor's order (two markers alike but for the process, two step
names of the same total time, two ranges of different names with the same start and end) while a
name repeats 3+ times, there is no partial. The set's part holds each device's step row, ready.

No partial (the SQL runs) where _gpu.py has none, or for other parameters than the defaults.
"""
from __future__ import annotations

import math

import numpy as np

from ..catalog import BY_ID
from ...gpu import intervals
from ._gpu import GpuColumns, _fixed, _round, device_times, made_with, marked_main

CHECK = "gpu_breakdown"
VERSION = 2  # 2: the per-step row
STEP_MIN = 3  # _tl_gb_stepname's "having count(*) >= 3"
Collector = GpuColumns
HINT = "the GPU waits for work: host_gpu_gaps and gpu_queue_delay say whether the host is too slow to feed it"


def part(cols: GpuColumns, starts) -> dict | None:
    g = cols.steady()
    if g is None or not len(starts) or cols.log_start != int(starts[0]):
        return None  # the set starts after the log's first record (a ring dump's earlier process records)
    steps = _steps(cols) if any(n >= STEP_MIN for n in cols.nvtx.values()) else ([], None)
    if steps is None:
        return None  # the SQL's main thread or step name is not certain here (the module doc)
    devices = {dev: [t.start, t.span, t.compute, t.compute_or_comm - t.compute, t.busy - t.compute_or_comm, t.busy]
               for dev, t in device_times(cols, g).items()}
    s, e = g["ts"], g["ts"] + g["dur"]
    per_step = {}
    (step_ts, step_dur), name = steps if steps[1] is not None else ((None, None), None)
    if name is not None:
        for d, dev in enumerate(g["devices"].tolist()):
            on = g["device_i"] == d
            row = _step_row(s[on], e[on], step_ts, step_dur)
            if row is not None:
                per_step[str(dev)] = row
    return {"set": {"version": VERSION, "params": BY_ID[CHECK].defaults(), "start": int(starts[0]),
                    "devices": devices, "step_name": name, "steps": per_step},
            "chunks": [{} for _ in range(len(starts))]}


def _steps(cols: GpuColumns):
    """((ts, dur) of the steps in start order, the step name), ([], None) without a step name, or
    None where the SQL's choice is not certain (the module doc)."""
    main = marked_main(cols.marks)
    if main is None or not cols.ranges:
        return None
    tid, pid = main
    ts, dur, t, p, name = (np.concatenate(c) for c in zip(*cols.ranges))
    mine = (t == tid) & (p == pid)
    ts, dur, name = ts[mine], dur[mine], name[mine]
    o = np.lexsort((-(ts + dur), ts))
    ts, dur, name = ts[o], dur[o], name[o]
    same = (ts[1:] == ts[:-1]) & (dur[1:] == dur[:-1]) & (name[1:] != name[:-1])
    if same.any():
        return None  # which one trace_processor nests in the other is its own order
    top = np.zeros(ts.size, bool)
    open_end = None  # the end of the top-level range open at this start (the converter nests them)
    for i, (a, b) in enumerate(zip(ts.tolist(), (ts + dur).tolist())):
        if open_end is None or b > open_end or a >= open_end:
            top[i], open_end = True, b
    ts, dur, name = ts[top], dur[top], name[top]
    names, inv, cnt = np.unique(name, return_inverse=True, return_counts=True)
    total = np.zeros(names.size, np.int64)
    np.add.at(total, inv.reshape(-1), dur)
    ok = cnt >= STEP_MIN
    if not ok.any():
        return [], None
    best = total[ok].max()
    if int((total[ok] == best).sum()) > 1:
        return None  # the SQL's order by sum(dur) desc limit 1 picks one of them
    c = int(names[ok][total[ok] == best][0])
    m = name == c
    return (ts[m], dur[m]), cols.s.strings[c]


def _step_row(s: np.ndarray, e: np.ndarray, step_ts: np.ndarray, step_dur: np.ndarray):
    """A device's step row: [steps, avg idle, max idle, worst step, its ts, its dur], or None (no step
    of positive duration). Busy time within a step from the union of the device's work."""
    us, ue = intervals.merge(s, e)
    before = np.concatenate([[0], np.cumsum(ue - us)])

    def busy_until(t):
        i = np.searchsorted(us, t, "right")  # intervals starting at or before t
        last = np.maximum(i - 1, 0)
        inside = np.where(i > 0, np.minimum(t - us[last], ue[last] - us[last]), 0)
        return before[np.maximum(i - 1, 0)] * (i > 0) + inside
    number = np.arange(1, step_ts.size + 1)
    pos = step_dur > 0
    if not pos.any() or not us.size:
        idle = np.ones(int(pos.sum()))
    else:
        a, b = step_ts[pos], step_ts[pos] + step_dur[pos]
        idle = 1.0 - 1.0 * (busy_until(b) - busy_until(a)) / step_dur[pos]
    if not idle.size:
        return None
    w = int(np.flatnonzero(idle == idle.max())[0])  # ties: the earliest step
    return [int(idle.size), math.fsum(idle.tolist()) / idle.size, float(idle.max()), int(number[pos][w]),
            int(step_ts[pos][w]), int(step_dur[pos][w])]



def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part (None where the partial does not apply: run the SQL)."""
    if not made_with(set_part, VERSION, params):
        return None
    warn_at, t0 = params["idle_warn_fraction"], int(set_part["start"])
    rows = []
    for dev, (ts, span, compute, comm_only, copy_only, busy) in sorted(set_part["devices"].items(),
                                                                       key=lambda kv: int(kv[0])):
        if span <= 0:
            continue
        warn = span - busy >= warn_at * span
        pct = [_fixed(100.0 * x / span, 0) for x in (compute, comm_only, copy_only, span - busy)]
        text = (f"GPU {int(dev)}: compute {pct[0]}%, communication not overlapped {pct[1]}%, copies/memsets alone "
                f"{pct[2]}%, idle {pct[3]}% of {_fixed(span / 1e9, 2)} s (steady state, from "
                f"+{_fixed((ts - t0) / 1e9, 2)} s)")
        rows.append({"severity": "warning" if warn else "ok", "finding": text, "ts": ts, "dur": span,
                     "hint": HINT if warn else None, "device": int(dev),
                     "compute_fraction": _round(1.0 * compute / span, 4),
                     "comm_fraction": _round(1.0 * comm_only / span, 4),
                     "copy_fraction": _round(1.0 * copy_only / span, 4),
                     "idle_fraction": _round(1.0 * (span - busy) / span, 4)})
    for dev, (n, avg, worst, step, ts, dur) in sorted(set_part["steps"].items(), key=lambda kv: int(kv[0])):
        text = (f"GPU {int(dev)} per step (NVTX range '{set_part['step_name']}', {n} steps): idle "
                f"{_fixed(100.0 * avg, 0)}% on average, {_fixed(100.0 * worst, 0)}% in the worst step (step {step})")
        rows.append({"severity": "info", "finding": text, "ts": ts, "dur": dur, "hint": None, "device": int(dev),
                     "compute_fraction": None, "comm_fraction": None, "copy_fraction": None,
                     "idle_fraction": _round(avg, 4)})
    return rows
