"""launch_latency (sql/launch_latency.sql) as a partial computed at conversion.

Its inputs are _sched.py's: every kernel launch call (process, thread, ts, dur, function without its
_ptsz/_ptds suffix, kernel and `py` args), held to the end of the conversion, each process' start-up
(tl_startup), the threads' names and their thread_state rows. The launches judged are the SQL's _tl_ll: dur > 0, not the first of its (process, kernel
arg) pair, not in its process' start-up. The set part holds per function n, p50, p99 and max (nearest
rank, exact) and whether any launch was recorded at all (the n/a text). Each chunk's part holds, per
function, its outliers under those medians (how many, the first start and last end, the Python lines
they came from) and the chunk's longest max_outliers + 1 outliers of all functions, each with its thread's
tid and name, Python line and the thread's state over it (the SQL's span join of thread_state rows
with dur > 0: the running, runnable (R, R+) and blocked (S, D*) fractions and the ns covered; null
without any: "thread state not recorded"): the merge takes the longest max_outliers and sees whether a
tie crosses or falls inside that cut. Bounded: functions x lines + max_outliers + 1.

No partial (the SQL runs) where _sched.py declines, without any CUDA call (the check is then "not
recorded", not n/a), when two launches tie for the first of a (process, kernel) pair (the SQL's
row_number picks one by its row order), with more Python lines than MAX_LINES in a chunk's part, for
other parameters than the defaults; none from the merge when durations tie among the longest
max_outliers + 1 outliers (the SQL's `order by dur desc limit` and the rows' order hang on its row order),
a listed launch's thread has no name in the recording (the trace's may come from elsewhere) or its
thread_state rows are not certain (_sched.py's thread_states: None).
"""
from __future__ import annotations

import numpy as np

from ..catalog import BY_ID
from ._gpu import (_fixed, _g, _py_line, _round, add_summary, launched_from, made_with, nearest_rank,
                   outlier_summary, startup_ends)
from ._sched import SchedColumns

CHECK = "launch_latency"
VERSION = 1
MAX_LINES = 1_000       # Python lines per function in a chunk's part
Collector = SchedColumns


def _judged(cols: SchedColumns):
    """The launches the SQL judges (its _tl_ll) as a dict of arrays, and how many launches were
    recorded at all; None where the SQL's choice of each kernel's first launch is a tie."""
    if not cols.launch:
        return {}, 0
    ts, tid, pid, key = (np.concatenate(c) for c in zip(*cols.launch))
    dur, fn, kernel, py = (np.concatenate(c) for c in zip(*cols.launch_more))
    total = ts.size
    idx = np.flatnonzero(dur > 0)
    if not idx.size:
        return {}, total
    # each (process, kernel arg or '') pair's first launch with a duration: row_number() ... = 1
    k = np.where(kernel[idx] < 0, cols.s.code(""), kernel[idx]).astype(np.int64)
    order = np.lexsort((ts[idx], k, pid[idx]))
    pk = (pid[idx].astype(np.int64) << 32 | k & 0xFFFFFFFF)[order]
    head = np.r_[True, pk[1:] != pk[:-1]]
    second = np.r_[~head[1:], False] & head  # a first with a next of its pair
    if (ts[idx][order][np.flatnonzero(second)] == ts[idx][order][np.flatnonzero(second) + 1]).any():
        return None
    first = np.zeros(idx.size, bool)
    first[order[head]] = True
    ends = startup_ends(ts, pid, key)
    uniq, inv = np.unique(pid[idx], return_inverse=True)
    startup_end = np.array([ends.get(p) or 0 for p in uniq.tolist()], np.int64)[inv.reshape(-1)]
    keep = idx[~first & (ts[idx] >= startup_end)]
    # a launch left out with a duration stays left out whatever duration trace_processor gives it, as long
    # as it has one (the first of its pair among those with one)
    strict = np.ones(total, bool)
    strict[idx[first | (ts[idx] < startup_end)]] = False
    if not _nested_as_written(cols, ts, tid, dur, strict):
        return None
    return {"ts": ts[keep], "dur": dur[keep], "tid": tid[keep], "fn": fn[keep], "py": py[keep]}, total


def _nested_as_written(cols: SchedColumns, ts, tid, dur, strict) -> bool:
    """Whether trace_processor gives every `strict` launch the duration the converter wrote, and
    every other one a duration > 0. Each thread slice
    is a begin and an end packet on its thread's track, and an end closes the slice on top of the
    track's stack: a slice that starts inside a launch and ends after it, or starts before it and
    ends inside it, swaps ends with it; one that starts at the same time with another end, ends when
    it starts or starts when it ends is ordered as trace_processor's sorter likes (the synthetic
    8-GPU node's NVTX steps start with their first launch, now and then). Only an end at its start
    can close a launch with a duration at its start."""
    if cols.spans:
        s_tid, s_ts, s_end = (np.concatenate(c) for c in zip(*cols.spans))
    else:
        s_tid, s_ts, s_end = (np.zeros(0, np.int64),) * 3
    end = ts + np.maximum(dur, 0)
    for t in np.unique(tid).tolist():
        mine = tid == t
        other = s_tid == t
        a_ts, a_end = np.r_[s_ts[other], ts[mine]], np.r_[s_end[other], end[mine]]  # every slice of the thread
        loose = mine & ~strict
        e_all = np.sort(a_end)
        if (np.searchsorted(e_all, ts[loose], "right") > np.searchsorted(e_all, ts[loose])).any():
            return False  # an end at a loose launch's start (its own is later: it has a duration)
        lo_, hi_ = ts[mine & strict], end[mine & strict]  # the launches whose duration counts
        by_ts = np.argsort(a_ts, kind="stable")
        t_ts, t_end = a_ts[by_ts], a_end[by_ts]
        by_end = np.argsort(a_end, kind="stable")
        e_end, e_ts = a_end[by_end], a_ts[by_end]
        big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        # starts inside (ts, end) ending after end; ends inside it, started before ts
        if (_range(np.maximum, t_end, np.searchsorted(t_ts, lo_, "right"), np.searchsorted(t_ts, hi_), small)
                > hi_).any():
            return False
        if (_range(np.minimum, e_ts, np.searchsorted(e_end, lo_, "right"), np.searchsorted(e_end, hi_), big)
                < lo_).any():
            return False
        # the same start, another end
        at = np.searchsorted(t_ts, lo_), np.searchsorted(t_ts, lo_, "right")
        if ((_range(np.maximum, t_end, *at, small) != hi_) | (_range(np.minimum, t_end, *at, big) != hi_)).any():
            return False
        # an end at its start (of a slice that started before), a start at its end (of one ending after)
        if (_range(np.minimum, e_ts, np.searchsorted(e_end, lo_), np.searchsorted(e_end, lo_, "right"), big)
                < lo_).any():
            return False
        if (_range(np.maximum, t_end, np.searchsorted(t_ts, hi_), np.searchsorted(t_ts, hi_, "right"), small)
                > hi_).any():
            return False
    return True


def _range(ufunc, vals: np.ndarray, lo: np.ndarray, hi: np.ndarray, empty: int) -> np.ndarray:
    """ufunc.reduce of vals[lo[i]:hi[i]] for each i (`empty` where the range is empty)."""
    out = np.full(lo.size, empty, np.int64)
    m = lo < hi
    if m.any():
        idx = np.empty(2 * int(m.sum()), np.int64)
        idx[0::2], idx[1::2] = lo[m], hi[m]
        out[m] = ufunc.reduceat(np.r_[vals, empty], idx)[0::2]  # (the sentinel: hi may be len(vals))
    return out


def _state(cols: SchedColumns, tid: int, ts: int, dur: int):
    """The thread's state over [ts, ts + dur) as the SQL's span join of its thread_state rows with
    dur > 0 gives it: [running, runnable, blocked, ns covered], None where no row covers it ("thread
    state not recorded"), False where its rows are not certain."""
    if not cols.sw:
        return None  # no switch: thread_state has no row with a duration
    st = cols.thread_states(tid)
    if st is None:
        return False
    d = np.minimum(st["ts"] + st["dur"], ts + dur) - np.maximum(st["ts"], ts)
    m = (st["dur"] > 0) & (d > 0)
    covered = int(d[m].sum())
    if not covered:
        return None
    state, d = st["state"][m], d[m]

    def share(*names, prefix=None):
        hit = np.array([x in names or (prefix is not None and x is not None and x.startswith(prefix))
                        for x in state.tolist()], bool)
        return int(d[hit].sum()) / covered
    return [share("Running"), share("R", "R+"), share("S", prefix="D"), covered]


def part(cols: SchedColumns, starts) -> dict | None:
    """The set's part and each chunk's (the module doc), or None: no partial."""
    if cols.declined or not cols.cuda:
        return None  # (no CUDA call: the SQL's "not recorded")
    got = _judged(cols)
    if got is None:
        return None
    ll, total = got
    starts = np.asarray(starts, np.int64)
    strings = cols.s.strings
    p = BY_ID[CHECK].defaults()
    keep = int(p["max_outliers"])
    stats, chunks = {}, [{"functions": {}, "worst": []} for _ in range(starts.size)]
    if ll and ll["ts"].size:
        ts, dur, tid, fn, py = (ll[k] for k in ("ts", "dur", "tid", "fn", "py"))
        chunk = np.clip(np.searchsorted(starts, ts, "right") - 1, 0, starts.size - 1)
        outliers = []
        order = np.lexsort((dur, fn))  # by function, then duration
        cuts = np.flatnonzero(np.diff(fn[order])) + 1
        for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, order.size].tolist()):
            m = order[lo:hi]
            d = dur[m]
            p50 = nearest_rank(d, 0.50)
            label = strings[int(fn[m[0]])]
            stats[label] = [int(d.size), p50, nearest_rank(d, 0.99), int(d[-1])]
            out = m[(d >= p["outlier_factor"] * p50) & (d >= p["min_outlier_us"] * 1000)]
            outliers.append(out)
            for k in np.unique(chunk[out]).tolist():
                summary = outlier_summary(out[chunk[out] == k], ts, dur, py, strings, MAX_LINES)
                if summary is None:
                    return None
                chunks[k]["functions"][label] = summary
        out = np.concatenate(outliers)
        for k in np.unique(chunk[out]).tolist():
            o = out[chunk[out] == k]
            for i in o[np.argsort(-dur[o], kind="stable")[:keep + 1]].tolist():
                t, d = int(ts[i]), int(dur[i])
                chunks[k]["worst"].append([t, d, strings[int(fn[i])], int(tid[i]), cols._name(int(tid[i])) or None,
                                           _py_line(strings[py[i]]) if py[i] >= 0 else None,
                                           _state(cols, int(tid[i]), t, d)])
    return {"set": {"version": VERSION, "params": p, "stats": stats, "launches": total}, "chunks": chunks}


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part and each chunk's (None: a chunk without one; then,
    when params differ from those the partial was made with, or where the SQL's pick of the worst
    launches hangs on its row order, None: run the SQL)."""
    if not made_with(set_part, VERSION, params) or any(c is None for c in chunk_parts):
        return None
    stats = set_part["stats"]
    factor, keep = params["outlier_factor"], int(params["max_outliers"])
    per: dict = {}
    worst = []
    for part in chunk_parts:
        for label, o in part["functions"].items():
            add_summary(per, label, o)
        worst += part["worst"]
    worst = sorted(worst, key=lambda w: -w[1])[:keep + 1]
    if any(a[1] == b[1] for a, b in zip(worst, worst[1:])):
        return None  # equal durations: which are listed, and in which order, is the SQL's row order
    worst = worst[:keep]
    if any(w[4] is None or w[6] is False for w in worst):
        return None  # a thread without a name, or whose states are not certain
    rows = []
    for label in sorted(per):
        n, p50, p99, mx = stats[label]
        a = per[label]
        text = (f"{label}: {a['outliers']:,} of {n:,} launches took over {_g(factor)}x the median "
                f"({_fixed(p50 / 1e3, 1)} us); p99 {_fixed(p99 / 1e3, 1)} us ({_fixed(p99 / p50, 0)}x the median), "
                f"worst {_fixed(mx / 1e6, 2)} ms")
        more, top_line, share = launched_from(a["lines"])
        text += more
        rows.append(_row("error" if p99 >= params["p99_error_factor"] * p50 else "warning", text,
                         a["first_ts"], a["last_end"] - a["first_ts"], function=label, outliers=a["outliers"],
                         launches=n, p50_us=_round(p50 / 1e3, 3), p99_us=_round(p99 / 1e3, 3),
                         max_us=_round(mx / 1e3, 3), python_line=top_line, python_share=share))
    for ts, dur, fn, tid, name, line, state in worst:
        p50 = stats[fn][1]
        text = f"{fn} took {_fixed(dur / 1e6, 2)} ms ({_fixed(dur / p50, 0)}x its median) on {name} (tid {tid})"
        hint = running = runnable = None
        if state is None:
            text += "; thread state not recorded"
        else:
            running, runnable, blocked, _ = state
            text += (f"; the thread was running {_fixed(100 * running, 0)}%, runnable (waiting for a CPU) "
                     f"{_fixed(100 * runnable, 0)}%, sleeping/blocked {_fixed(100 * blocked, 0)}%")
            hint = ("the launching thread lost its CPU: see cpu_contention; keep other work off its core"
                    if runnable >= max(running, blocked) else
                    "the driver blocked inside the launch (launch queue full, a lock, page faults)"
                    if blocked >= running else
                    "the launch itself burned CPU: argument setup, first-launch module loading or JIT")
            running, runnable = _round(running, 3), _round(runnable, 3)
        if line is not None:
            text += f"; launched from {line}"
        rows.append(_row("info", text, ts, dur, hint, function=fn, max_us=_round(dur / 1e3, 3),
                         running_fraction=running, runnable_fraction=runnable, python_line=line))
    for label in sorted(set(stats) - set(per)):
        n, p50, p99, mx = stats[label]
        rows.append(_row("ok", f"{label}: {n:,} launches, median {_fixed(p50 / 1e3, 1)} us, p99 "
                         f"{_fixed(p99 / 1e3, 1)} us, no outliers", function=label, outliers=0, launches=n,
                         p50_us=_round(p50 / 1e3, 3), p99_us=_round(p99 / 1e3, 3), max_us=_round(mx / 1e3, 3)))
    if not stats:
        rows.append(_row("n/a", "kernel launches were recorded without durations (entry-only probes)"
                         if set_part["launches"] else "no kernel launches in this trace"))
    return rows


def _row(severity, finding, ts=None, dur=None, hint=None, **evidence) -> dict:
    """A row with the SQL's columns (those not given: NULL)."""
    cols = ("function", "outliers", "launches", "p50_us", "p99_us", "max_us", "running_fraction",
            "runnable_fraction", "python_line", "python_share")
    return {"severity": severity, "finding": finding, "ts": ts, "dur": dur, "hint": hint,
            **{c: evidence.get(c) for c in cols}}
