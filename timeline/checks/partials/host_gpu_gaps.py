"""host_gpu_gaps (sql/host_gpu_gaps.sql) as a partial computed at conversion. With GPU activity (the
gpu family) as below; without it, the SQL judges each process' gaps between GPU submissions, and so
does `_submission_gaps` (one process, no NVML utilization counters beside them: else no partial).

Its inputs are _gpu.py's: per device, its work, its steady state (tl_gpu_window) and the thread that
feeds it (the owner: most flows into its work); each process' first CUDA call, start-up end
(tl_startup) and blocking calls (synchronizations, blocking copies, allocations: the SQL's `b`); and
the owner thread's scheduler states (thread_state) from the sched collector. A device's idle stretches
are the gaps of the union of its work (_tl_gpu_seg's empty segments) of min_idle_us or more. A stretch
is host-bound when the owner's process waited in blocking calls less than half of it (the integral of
calls in progress over it) and the owner was running or runnable min_active_fraction of it; with no
state over it, it is unknown (counted apart). All of it spans the whole recording, so the partial is
the set's part only: per device its steady state's start and span, busy time, owner, the host-bound
stretch totals (count, total, longest, the earliest longest one's start), the unknown ones', and the
3 longest host-bound stretches for the detail rows; per process with GPU submissions, its start-up
line. Bounded: a few numbers per device and process.

Ties go by the trace's content, as the SQL's `order by dur desc, ts` does. No partial (the SQL runs)
where _gpu.py has none, where two threads tie for a device's owner (the SQL takes the lowest utid,
trace_processor's numbering), where a name the finding prints is not known, where the set starts after
the log's first record, or for other parameters than the defaults.
"""
from __future__ import annotations

import numpy as np

from ..catalog import BY_ID
from ...gpu import intervals
from ._gpu import GpuColumns, _fixed, _g, _round, device_times, made_with
from ._sched import SchedColumns

CHECK = "host_gpu_gaps"
VERSION = 2
Collector = (GpuColumns, SchedColumns)
ACTIVE = ("Running", "R", "R+")  # the SQL's "on the CPU or waiting for it"


def within(s: np.ndarray, e: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per [a, b): the time covered by the disjoint, sorted intervals [s, e) within it."""
    if not a.size:
        return np.zeros(0, np.int64)
    if not s.size:
        return np.zeros(a.size, np.int64)
    return intervals.covered(s, e, np.column_stack([a, b]).ravel())[::2]


def waited(ts: np.ndarray, end: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per [a, b): the sum of its overlaps with the calls [ts, end) (overlapping calls each count), as the
    SQL's _tl_hg_wait/_tl_hg_blocked: W(b) - W(a), W the integral of the number of calls in progress."""
    if not a.size:
        return np.zeros(0, np.int64)
    if not ts.size:
        return np.zeros(a.size, np.int64)
    edge = np.concatenate([ts, end])
    step = np.concatenate([np.ones(ts.size, np.int64), -np.ones(end.size, np.int64)])
    pt, inv = np.unique(edge, return_inverse=True)
    n = np.zeros(pt.size, np.int64)
    np.add.at(n, inv.reshape(-1), step)
    n = np.cumsum(n)                                      # calls in progress from pt[k] to pt[k + 1]
    w = np.concatenate([[0], np.cumsum(n[:-1] * np.diff(pt))])  # the integral up to pt[k]

    def at(t):
        k = np.searchsorted(pt, t, "right") - 1
        kk = np.maximum(k, 0)
        return np.where(k >= 0, w[kk] + n[kk] * (t - pt[kk]), 0)
    return at(b) - at(a)


def part(collectors, starts) -> dict | None:
    cols, sched = collectors
    if not len(starts) or cols.log_start != int(starts[0]) or cols.declined:
        return None
    if not cols.gpu:
        return _submission_gaps(cols, sched, starts)
    g = cols.steady()
    if g is None:
        return None
    p = BY_ID[CHECK].defaults()
    min_idle = int(p["min_idle_us"] * 1000)
    s_all, e_all = g["ts"], g["ts"] + g["dur"]
    if cols.block:
        b_ts, b_dur, b_pid = (np.concatenate(c) for c in zip(*cols.block))
    else:
        b_ts = b_dur = b_pid = np.zeros(0, np.int64)
    times = device_times(cols, g)
    devices, gaps_of = {}, {}
    for d, dev in enumerate(g["devices"].tolist()):
        tid, pid = int(g["owner"][d]), int(g["owner_pid"][d])
        name = sched._name(tid) or None
        if tid < 0 or name is None:
            return None  # owners tie (trace_processor's utid order decides), or a name not known
        on = g["device_i"] == d
        us_, ue = intervals.merge(s_all[on], e_all[on])
        a, b = ue[:-1], us_[1:]
        keep = b - a >= min_idle
        a, b = a[keep], b[keep]
        t = times[str(dev)]
        startup = a < t.start
        mine = b_pid == pid
        blocked = waited(b_ts[mine], b_ts[mine] + b_dur[mine], a, b)
        judged = _judged(sched, tid, a, b, blocked, p)
        if judged is None:
            return None  # the sched collector cannot say what trace_processor shows (its doc)
        host, unknown = judged
        dur = b - a
        gaps_of[str(dev)] = (pid, a, dur, startup)
        judged = host & ~startup & ~unknown
        order = np.lexsort((a[judged], -dur[judged]))  # longest first, the earliest of equal ones
        top = [[int(x), int(y)] for x, y in zip(a[judged][order][:3].tolist(), dur[judged][order][:3].tolist())]
        gone = host & ~startup & unknown
        devices[str(dev)] = [t.start, t.span, t.busy, tid, name, int(judged.sum()), int(dur[judged].sum()),
                             int(dur[judged].max()) if judged.any() else None, int(gone.sum()),
                             int(dur[gone].sum()), top]
    procs = {}
    ends = g["startup_ends"]
    for pid in sorted(cols.submitters):
        first, end = cols.first_call.get(pid), ends.get(pid)
        if first is None or end is None or end - first < p["min_gap_ms"] * 1e6:
            continue
        name = sched._name(pid) or None
        if name is None:
            return None
        sel = [(a[st], dur[st]) for q, a, dur, st in gaps_of.values() if q == pid]
        durs = np.concatenate([x[1] for x in sel]) if sel else np.zeros(0, np.int64)
        procs[str(pid)] = [name, first, end, int(durs.size), int(durs.sum()), int(durs.max()) if durs.size else 0]
    return {"set": {"version": VERSION, "params": p, "start": int(starts[0]), "devices": devices,
                    "startups": procs},
            "chunks": [{} for _ in range(len(starts))]}


def _judged(sched: SchedColumns, tid: int, a, b, blocked, p):
    """Of the gaps [a, b) of thread tid: host-bound ones, and those with no thread state over them
    (unknown); None where the sched collector cannot say what trace_processor shows."""
    states = sched.thread_states(tid)
    if states is None:
        return None
    pos = states["dur"] > 0
    st_ts, st_end, st_state = states["ts"][pos], states["ts"][pos] + states["dur"][pos], states["state"][pos]
    covered = within(st_ts, st_end, a, b)
    act = np.isin(st_state, ACTIVE)
    active = within(st_ts[act], st_end[act], a, b)
    dur = b - a
    return (blocked < 0.5 * dur) & ((covered == 0) | (active >= p["active_fraction"] * dur)), covered == 0


def _submission_gaps(cols: GpuColumns, sched: SchedColumns, starts) -> dict | None:
    """Without GPU activity: the SQL's per-process rows, judged on the gaps between a process' GPU
    submissions (_tl_hg_sub: launches, NCCL calls, graph launches, async copies), each gap on the thread
    of the submission before it; the start-up lines. No partial beside NVML's utilization counters (the
    SQL's other judge), for submissions of one process at the same ts (which is next: lead()'s row
    order), or for more than one process with submissions (the SQL lists them in trace_processor's
    process order)."""
    if cols.nvml:
        return None
    p = BY_ID[CHECK].defaults()
    out = {"version": VERSION, "params": p, "start": int(starts[0]), "devices": {}, "startups": {},
           "processes": {}}
    if not cols.subs:
        return {"set": out, "chunks": [{} for _ in range(len(starts))]}
    ts, dur, tid, pid = (np.concatenate(c) for c in zip(*cols.subs))
    if np.unique(pid).size > 1:
        return None
    o = np.lexsort((ts, pid))
    ts, dur, tid, pid = ts[o], dur[o], tid[o], pid[o]
    if (ts[1:] == ts[:-1]).any():
        return None
    q = int(pid[0])
    name = sched._name(q) or None
    if name is None:
        return None
    ends = cols._startup_ends()
    first, end = cols.first_call.get(q), ends.get(q)
    a, b = ts[:-1] + dur[:-1], ts[1:]
    keep = b - a >= p["min_gap_ms"] * 1e6
    a, b, on = a[keep], b[keep], tid[:-1][keep]
    startup = a < (end or 0)
    if cols.block:
        b_ts, b_dur, b_pid = (np.concatenate(c) for c in zip(*cols.block))
        mine = b_pid == q
        blocked = waited(b_ts[mine], b_ts[mine] + b_dur[mine], a, b)
    else:
        blocked = np.zeros(a.size, np.int64)
    host, unknown = np.zeros(a.size, bool), np.zeros(a.size, bool)
    for t in np.unique(on).tolist():
        m = on == t
        got = _judged(sched, t, a[m], b[m], blocked[m], p)
        if got is None:
            return None
        host[m], unknown[m] = got
    gd = b - a
    w0 = max(int(ts.min()), end or 0)
    w1 = int((ts + dur).max())
    judged = host & ~startup & ~unknown
    order = np.lexsort((a[judged], -gd[judged]))
    top = [[int(x), int(y)] for x, y in zip(a[judged][order][:3].tolist(), gd[judged][order][:3].tolist())]
    gone = host & ~startup & unknown
    # the row's ts: the longest judged gap, start-up ones included (the SQL's subquery does not leave them out)
    seen = host & ~unknown
    at = int(a[seen][np.lexsort((a[seen], -gd[seen]))[0]]) if seen.any() else w0
    out["processes"][str(q)] = [name, w0, w1 - w0, int((ts >= w0).sum()), int(judged.sum()), int(gd[judged].sum()),
                                int(gd[judged].max()) if judged.any() else None, int(gone.sum()), int(gd[gone].sum()),
                                top, at]
    if first is not None and end is not None and end - first >= p["min_gap_ms"] * 1e6:
        s = gd[startup]
        out["startups"][str(q)] = [name, first, end, int(s.size), int(s.sum()), int(s.max()) if s.size else 0]
    return {"set": out, "chunks": [{} for _ in range(len(starts))]}


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part (None where the partial does not apply: run the SQL)."""
    if not made_with(set_part, VERSION, params):
        return None
    p, t0 = params, int(set_part["start"])
    rows, detail = [], []
    for dev, (ts, span, busy, tid, name, gaps, total, longest, unknown, unknown_total, top) in sorted(
            set_part["devices"].items(), key=lambda kv: int(kv[0])):
        if span <= 0:
            continue
        sev = ("error" if total >= p["error_fraction"] * span else "warning" if total >= p["warn_fraction"] * span
               else "info" if unknown > 0 else "ok")
        idle = span - busy
        text = (f"GPU {int(dev)} was idle {_fixed(100.0 * idle / span, 0)}% of its steady state "
                f"({_fixed(idle / 1e9, 2)} s of {_fixed(span / 1e9, 2)} s); {gaps:,} idle stretches of >= "
                f"{_g(p['min_idle_us'])} us while {name} (tid {tid}), which feeds it, was busy on the CPU: "
                f"{_fixed(total / 1e9, 3)} s = {_fixed(100.0 * total / span, 0)}%"
                + (f"; longest {_fixed(longest / 1e6, 1)} ms" if gaps > 0 else ""))
        if unknown > 0:
            text += (f"; {unknown} more stretches ({_fixed(unknown_total / 1e9, 3)} s) not judged: thread state not "
                     "recorded (-e sched)")
        rows.append(_row(sev, text, top[0][0] if top else ts, longest if longest is not None else span, None,
                         _round(1.0 * total / span, 4), gaps, _round((longest or 0) / 1e6, 3)))
        if total >= p["warn_fraction"] * span:
            detail += top
    for pid, (name, ts, span, subs, gaps, total, longest, unknown, unknown_total, top, at) in sorted(
            set_part.get("processes", {}).items(), key=lambda kv: int(kv[0])):
        if span <= 0:
            continue
        sev = ("error" if total >= p["error_fraction"] * span else "warning" if total >= p["warn_fraction"] * span
               else "info" if unknown > 0 else "ok")
        text = (f"{name} (pid {int(pid)}): {gaps:,} gaps of >= {_g(p['min_gap_ms'])} ms between GPU submissions "
                f"while the submitting thread was busy on the CPU, {_fixed(total / 1e9, 3)} s = "
                f"{_fixed(100.0 * total / span, 0)}% of its submission span ({_fixed(span / 1e9, 2)} s, {subs:,} "
                "submissions)" + (f"; longest {_fixed(longest / 1e6, 1)} ms" if gaps > 0 else ""))
        if unknown > 0:
            text += (f"; {unknown} more gaps ({_fixed(unknown_total / 1e9, 3)} s) not judged: thread state not "
                     "recorded (-e sched)")
        rows.append(_row(sev, text, at, longest if longest is not None else span, None,
                         _round(1.0 * total / span, 4), gaps, _round((longest or 0) / 1e6, 3)))
        if total >= p["warn_fraction"] * span:
            detail += top
    for pid, (name, first, end, n, total, longest) in sorted(set_part["startups"].items(), key=lambda kv: int(kv[0])):
        text = (f"start-up of {name} (pid {int(pid)}): {_fixed((end - first) / 1e9, 2)} s from its first CUDA call "
                f"to the first launch of its last new kernel, with no GPU submissions for {_fixed(total / 1e9, 2)} s "
                f"of it ({n} gaps of >= {_g(p['min_gap_ms'])} ms, longest {_fixed(longest / 1e6, 1)} ms): module "
                "loading, library set-up, the input pipeline's first batches; the steady state is judged from "
                f"+{_fixed((end - t0) / 1e9, 2)} s on")
        rows.append(_row("info", text, first, end - first, None, None, n, _round(longest / 1e6, 3)))
    for ts, dur in sorted(detail, key=lambda x: (-x[1], x[0]))[:3]:
        rows.append(_row("info", f"GPU idle for {_fixed(dur / 1e6, 1)} ms after a submission while the host thread "
                         "was busy", ts, dur, None, None, None, _round(dur / 1e6, 3)))
    return rows


def _row(sev, text, ts, dur, hint, gap_fraction, gaps, longest_ms) -> dict:
    return {"severity": sev, "finding": text, "ts": ts, "dur": dur, "hint": hint, "gap_fraction": gap_fraction,
            "gaps": gaps, "longest_ms": longest_ms, "low_util_fraction": None}
