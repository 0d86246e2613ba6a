"""cpu_contention (sql/cpu_contention.sql) as a partial computed at conversion.

Its inputs are _sched.py's: the main thread (tl_main_thread), its thread states (thread_state) over
tl_steady's steady state (or the whole recording), the backward thread's (tl_backward_thread), and,
while the waiting is reportable, who held each CPU (sched) during the main thread's long waits. All
of it is over the whole recording (the median latency, the windows over the thread's span), so the
partial is the set's part only, worked out once at the end of the conversion: the SQL's _tl_cc
numbers, the top-3 of who held the CPUs, the backward thread's numbers, the busiest window of
switches and the worst window (each with its ts, dur and counts) and the steady state's "from +x s".
Each chunk's part is empty. Bounded: some 40 numbers and 3 short names.

Windows as the SQL's (_tl_windows: window_s long, widened to at most WINDOW_CAP over the span; a
state cut at window edges as its span_join cuts it); a window's times are sums of the clipped states.
Who held the CPUs: each sched slice's overlap with the long waits, a CPU's open last slice (dur -1)
as span_join cuts it (a -1 ns piece where it starts inside a wait).

No partial (the SQL runs) where _sched.py has none (no certain main thread, its states not certain),
for other parameters than the defaults, or where the SQL breaks a tie by its row order (two windows
with the same top rate or share that would be reported, two of the top-3 CPU holders with the same
time), or where the recording's start is not certain to the 10 ms the steady state's "+x s" shows.
"""
from __future__ import annotations

import numpy as np

from ..catalog import BY_ID, WINDOW_CAP
from ...converters.model import OUTSIDE_TID
from ._gpu import _fixed, _g, _round, made_with, nearest_rank
from ._sched import SchedColumns

CHECK = "cpu_contention"
VERSION = 1
Collector = SchedColumns
STORM_HINT = ("the thread blocks and wakes constantly (tight producer/consumer hand-offs, contended locks, tiny "
              "queue reads); batch the hand-offs")
IDLE_PSEUDO = 4194305  # the idle task's pseudo thread in Chrome JSON: never a CPU holder
COLUMNS = ("severity", "finding", "ts", "dur", "hint", "runnable_fraction", "latency_p50_ms", "latency_p99_ms",
           "switches_per_s")


def _rows_in(st: dict, lo, hi) -> dict:
    """The thread's states as the SQL's `dur > 0` and steady-state filter keep them."""
    keep = st["dur"] > 0
    if lo is not None:
        keep &= (st["ts"] >= lo) & (st["ts"] < hi)
    state = st["state"][keep]
    return {"ts": st["ts"][keep], "dur": st["dur"][keep], "running": state == "Running",
            "r": (state == "R") | (state == "R+")}


def _sums(rows: dict, min_wait_ns: float) -> tuple[int, int, int, np.ndarray]:
    waiting = rows["r"] & (rows["dur"] >= min_wait_ns)
    return int(rows["dur"][rows["running"]].sum()), int(rows["dur"][waiting].sum()), int(waiting.sum()), waiting


def _below(ts: np.ndarray, end: np.ndarray, on: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time of the intervals [ts, end) (sorted, not overlapping) selected by `on`, before each of t."""
    cum = np.r_[0, np.cumsum(np.where(on, end - ts, 0))]
    i = np.searchsorted(ts, t, "right")  # intervals starting at or before t
    last = np.maximum(i - 1, 0)
    inside = np.where((i > 0) & on[last], np.clip(t - ts[last], 0, (end - ts)[last]), 0) if ts.size else 0
    return cum[last] * (i > 0) + inside if ts.size else np.zeros(len(t), np.int64)


def part(cols: SchedColumns, starts) -> dict | None:
    p = BY_ID[CHECK].defaults()
    if cols.declined or cols.sched_slices() is None or cols.log_start is None:
        return None
    main = cols.main_thread()
    base = {"version": VERSION, "params": p}
    chunks = [{} for _ in range(len(starts))]
    if main is None:
        if cols.main_declined:
            return None
        return {"set": {**base, "main": None}, "chunks": chunks}
    st = cols.thread_states(main["tid"])
    steady = cols.steady(main)
    if st is None or steady is None:
        return None
    lo, hi = steady if steady else (None, None)
    rows = _rows_in(st, lo, hi)
    min_wait = p["min_wait_us"] * 1000
    running, runnable, long_waits, waiting = _sums(rows, min_wait)
    out = {**base, "main": [main["name"], main["tid"]], "steady": None, "bw": None, "storm": None,
           "worst": None, "who": None}
    if steady:
        # trace_start() lies between the two bounds, and at or before the steady state's start (a CUDA
        # call's, itself in the trace)
        first, last = cols.start_bounds()
        a, b = (_fixed((lo - t) / 1e9, 2) for t in (first, min(last, lo)))
        if a != b:
            return None
        out["steady"] = a
    bw = cols.backward_thread(main)
    if bw is None:
        return None
    if bw:
        bst = cols.thread_states(bw["tid"])
        if bst is None:
            return None
        b = _rows_in(bst, lo, hi)
        if b["ts"].size:
            b_run, b_wait, b_long, _ = _sums(b, min_wait)
            out["bw"] = [bw["name"], bw["tid"], int(b["ts"].min()), int((b["ts"] + b["dur"]).max() - b["ts"].min()),
                         b_run, b_wait, b_long]
    if not rows["ts"].size:
        out["stats"] = None
        return {"set": out, "chunks": chunks}
    r = np.sort(rows["dur"][rows["r"]])
    ts, end = rows["ts"], rows["ts"] + rows["dur"]
    span_ts, span_end = int(ts.min()), int(end.max())
    span = span_end - span_ts
    out["stats"] = [running, runnable, long_waits, int(r.size), nearest_rank(r, 0.5) if r.size else None,
                    nearest_rank(r, 0.99) if r.size else None, int(rows["running"].sum()), span, span_ts, span_end]
    reportable = runnable >= p["warn_fraction"] * (runnable + running) and runnable >= p["min_wall_fraction"] * span
    # the windows (_tl_windows)
    want = int(p["window_s"] * 1e9)
    step = max(want, (span + WINDOW_CAP - 1) // WINDOW_CAP)
    n_win = max(1, -(-span // step))
    w_ts = span_ts + step * np.arange(n_win, dtype=np.int64)
    w_end = np.minimum(w_ts + step, span_end)
    # switches per window (the storm)
    win = (ts[rows["running"]] - span_ts) // step
    n = np.bincount(win, minlength=n_win)
    w_dur = w_end - w_ts
    ok = (n > 0) & ((w_dur >= 0.1e9) | (n >= 1000))
    if ok.any():
        rate = np.where(ok, n * 1e9 / np.maximum(w_dur, 1), -1.0)
        top = np.flatnonzero(rate == rate.max())
        if rate.max() >= p["storm_switches_per_s"]:
            if top.size > 1:
                return None  # the SQL's `order by rate desc limit 1` picks one of them
            i = int(top[0])
            out["storm"] = [int(w_ts[i]), int(w_dur[i]), int(n[i])]
    if reportable:
        edges = np.r_[w_ts, w_end[-1]]
        r_win = np.diff(_below(ts, end, waiting, edges))
        run_win = np.diff(_below(ts, end, rows["running"], edges))
        tot = r_win + run_win
        ok = (tot > 0) & (r_win >= p["warn_fraction"] * tot)
        if ok.any():
            share = np.where(ok, 1.0 * r_win / np.maximum(tot, 1), -1.0)
            top = np.flatnonzero(share == share.max())
            if top.size > 1:
                return None  # ties: the SQL's order picks one
            i = int(top[0])
            out["worst"] = [int(w_ts[i]), int(w_end[i] - w_ts[i]), int(r_win[i]), int(run_win[i])]
        who = _who(cols, main, ts[waiting], end[waiting])
        if who is None:
            return None
        out["who"] = who
    return {"set": out, "chunks": chunks}


def _who(cols: SchedColumns, main: dict, ws: np.ndarray, we: np.ndarray):
    """Top 3 of [who, ns] that held a CPU while the main thread waited (the SQL's _tl_cc_who; ws, we:
    the waits, in time order), or None where not certain (a tie in the top 3, an unnamed thread)."""
    s = cols.sched_slices()
    hold = (s["tid"] != 0) & (s["tid"] != main["tid"]) & (s["tid"] != IDLE_PSEUDO)
    ts, dur, tid = s["ts"][hold], s["dur"][hold], s["tid"][hold]
    on = np.ones(ws.size, bool)
    busy = _below(ws, we, on, ts + np.maximum(dur, 0)) - _below(ws, we, on, ts)
    # A CPU's last slice is open (dur -1): span_join gives it a -1 ns piece where it starts in a wait
    # (a start at the wait's end is not in it), none elsewhere
    i = np.searchsorted(ws, ts, "right") - 1
    inside = (i >= 0) & (ts < we[np.maximum(i, 0)]) if ws.size else np.zeros(ts.size, bool)
    busy = np.where(dur < 0, np.where(inside, -1, 0), busy)
    some = busy != 0
    tids, inv = np.unique(tid[some], return_inverse=True)
    per = np.zeros(tids.size, np.int64)
    np.add.at(per, inv.reshape(-1), busy[some].astype(np.int64))
    labels: dict = {}
    for t, b in zip(tids.tolist(), per.tolist()):
        if t == OUTSIDE_TID:
            label = "tasks outside the recording"
        else:
            name = cols._name(t)
            if not name or cols.pid_of(t) is None:
                return None  # a NULL name or process: not modelled
            label = f"{name} (tid {t})"
        labels[label] = labels.get(label, 0) + b
    top = sorted(((b, lab) for lab, b in labels.items() if b >= 1e6), reverse=True)
    if any(top[i][0] == top[i + 1][0] for i in range(min(3, len(top) - 1))):
        return None  # equal times: the SQL's order decides which come first or make the top 3
    return [[lab, b] for b, lab in top[:3]]


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part (None where the partial does not apply: run the SQL)."""
    if not made_with(set_part, VERSION, params):
        return None
    return _rows(set_part, params)


def _rows(set_part: dict, p: dict) -> list:
    rows = []

    def row(**kw):
        rows.append({c: kw.get(c) for c in COLUMNS})
    if set_part["main"] is None:
        row(severity="n/a", finding="no main training thread found (no process with scheduled threads)")
        return rows
    thread, tid = set_part["main"]
    stats = set_part["stats"]
    want = int(p["window_s"] * 1e9)
    if stats is not None and stats[7] > 0:
        running, runnable, long_waits, waits, p50, p99, switches, span, span_ts, _ = stats
        hot = p99 is not None and p99 >= p["p99_latency_ms"] * 1e6 and waits >= 100
        if runnable < p["min_wall_fraction"] * span:
            sev = "warning" if hot else "ok"
        elif runnable >= p["error_fraction"] * (runnable + running):
            sev = "error"
        elif runnable >= p["warn_fraction"] * (runnable + running):
            sev = "warning"
        else:
            sev = "warning" if hot else "ok"
        text = (f"dispatcher thread {thread} (tid {tid}) waited for a CPU "
                f"{_fixed(100.0 * runnable / max(1, runnable + running), 0)}% of the time it wanted one "
                f"({_fixed(runnable / 1e9, 2)} s in {long_waits:,} waits of >= {_g(p['min_wait_us'])} us, "
                f"{_fixed(running / 1e9, 2)} s running); scheduling latency p50 {_fixed((p50 or 0) / 1e6, 3)} ms, "
                f"p99 {_fixed((p99 or 0) / 1e6, 3)} ms over {waits:,} wakeups and preemptions")
        if set_part["who"]:
            text += "; the CPUs were meanwhile taken by " + ", ".join(
                f"{lab} {_fixed(b / 1e9, 2)} s" for lab, b in set_part["who"])
        if set_part["steady"] is not None:
            text += f" (steady state from +{set_part['steady']} s: after start-up, to the last CUDA call)"
        row(severity=sev, finding=text, ts=span_ts, dur=span,
            runnable_fraction=_round(1.0 * runnable / max(1, runnable + running), 4),
            latency_p50_ms=_round((p50 or 0) / 1e6, 3), latency_p99_ms=_round((p99 or 0) / 1e6, 3),
            switches_per_s=_round(switches * 1e9 / max(1, span), 1))
    if set_part["bw"] is not None:
        name, btid, bts, bspan, brun, bwait, blong = set_part["bw"]
        if bspan > 0:
            if bwait < p["min_wall_fraction"] * bspan:
                sev = "ok"
            elif bwait >= p["error_fraction"] * (bwait + brun):
                sev = "error"
            else:
                sev = "warning" if bwait >= p["warn_fraction"] * (bwait + brun) else "ok"
            row(severity=sev, finding=(
                f"backward thread {name} (tid {btid}; PyTorch runs the backward pass and launches its kernels "
                f"there) waited for a CPU {_fixed(100.0 * bwait / max(1, bwait + brun), 0)}% of the time it "
                f"wanted one ({_fixed(bwait / 1e9, 2)} s in {blong:,} waits of >= {_g(p['min_wait_us'])} us, "
                f"{_fixed(brun / 1e9, 2)} s running)"),
                ts=bts, dur=bspan, runnable_fraction=_round(1.0 * bwait / max(1, bwait + brun), 4))
    if set_part["storm"] is not None:
        ts, dur, n = set_part["storm"]
        rate = n * 1e9 / dur
        if rate >= p["storm_switches_per_s"]:
            row(severity="warning", finding=(
                f"context-switch storm: the dispatcher switched {n:,} times in one {_fixed(dur / 1e9, 1)} s window "
                f"({int(_fixed(rate, 0)):,}/s)"), ts=ts, dur=dur, hint=STORM_HINT, switches_per_s=_round(rate, 1))
    if set_part["worst"] is not None:
        ts, dur, r, run = set_part["worst"]
        row(severity="info", finding=f"worst window: waited for a CPU {_fixed(100.0 * r / (r + run), 0)}% of the "
                                     "time it wanted one", ts=ts, dur=dur,
            runnable_fraction=_round(1.0 * r / (r + run), 4))
    if stats is not None:
        span, span_ts = stats[7], stats[8]
        step = max(want, (span + WINDOW_CAP - 1) // WINDOW_CAP)
        if step > want:
            row(severity="info", finding=(
                f"the dispatcher's span of {_fixed(span / 1e9, 0)} s would need {(span + want - 1) // want:,} "
                f"windows of {_g(p['window_s'])} s: they are {_fixed(step / 1e9, 0)} s long instead "
                f"({(span + step - 1) // step:,} of them)"))
    return rows
