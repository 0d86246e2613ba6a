"""rank_imbalance (sql/rank_imbalance.sql) as a partial computed at conversion.

Its inputs: the ranked processes (_tl_ranks: the converter's model gives each process's `rank`, the
one trace labels it `rank=N`) and their main thread (tid = pid); that thread's states (thread_state,
rebuilt by _sched.py). Everything is over the whole recording (the span every rank's main thread was
alive, the lowest rank's waits), so the partial is the set's part only, worked out once at the end:
the span, per rank its running / runnable / waiting ns clipped to it, and the lowest rank's step
periods' p50 and p90 (the SQL's k-index rule) with their count. Each chunk's part is empty. Bounded:
a few numbers per rank, at most MAX_RANKS ranks.

No partial (the SQL runs) where _sched.py has no certain thread states, where two processes have one
rank (the SQL's group by rank merges them), where a ranked process's main thread has no state or is
not its process's as the converter sees it (whether trace_processor has that thread row, and so
counts the rank, is not certain), for more than MAX_RANKS ranks, or for other parameters than the
defaults.
"""
from __future__ import annotations

import numpy as np

from ..catalog import BY_ID
from ._gpu import _fixed, _round, made_with
from ._sched import SchedColumns

CHECK = "rank_imbalance"
VERSION = 1
Collector = SchedColumns
MAX_RANKS = 4096
COLUMNS = ("severity", "finding", "ts", "dur", "hint", "rank", "spread", "busy_fraction", "waiting_fraction")
NA = ("fewer than two ranked processes (RANK / OMPI_COMM_WORLD_RANK / PMI_RANK / SLURM_PROCID) in this trace")


def ranked(cols: SchedColumns) -> dict | None:
    """rank -> pid of the processes the one trace labels rank=N, or None (two with one rank)."""
    out: dict = {}
    for pid, p in sorted(cols.model.processes.items()):
        r = (p.ranks or {}).get("rank")
        if r is None:
            continue
        if r in out:
            return None
        out[r] = pid
    return out


def part(cols: SchedColumns, starts) -> dict | None:
    p = BY_ID[CHECK].defaults()
    if cols.model is None:
        return None
    ranks = ranked(cols)
    if ranks is None or len(ranks) > MAX_RANKS:
        return None
    base = {"version": VERSION, "params": p}
    chunks = [{} for _ in range(len(starts))]
    if len(ranks) < 2:  # _tl_ranks has at most this many rows: n/a for certain
        return {"set": {**base, "ranks": None}, "chunks": chunks}
    if cols.declined or cols.sched_slices() is None:
        return None
    states = {}
    for r, pid in sorted(ranks.items()):
        st = cols.thread_states(pid)
        if st is None or not st["ts"].size or cols.pid_of(pid) not in (None, pid):
            return None
        keep = st["dur"] > 0
        states[r] = (pid, st["ts"][keep], st["dur"][keep], st["state"][keep])
    alive = [(int(ts.min()), int((ts + d).max())) for _, ts, d, _ in states.values() if ts.size]
    if len(alive) < 2:
        return None  # a rank whose states all have dur <= 0: not worth modelling
    t0, t1 = max(a for a, _ in alive), min(b for _, b in alive)
    if t1 <= t0:
        return None  # an empty span: the SQL divides by it
    per = []
    for r, (pid, ts, dur, state) in sorted(states.items()):
        on = (ts < t1) & (ts + dur > t0)
        if not on.any():
            continue  # no row of this rank in _tl_ri
        clip = np.minimum(ts + dur, t1) - np.maximum(ts, t0)
        s = state[on]
        per.append([int(r), int(pid), int(clip[on][s == "Running"].sum()),
                    int(clip[on][(s == "R") | (s == "R+")].sum()), int(clip[on][(s == "S") | (s == "D")].sum())])
    # the step periods: between the ends of the lowest rank's waits >= 1 ms, in start order
    _, ts, dur, state = states[min(states)]
    w = ((state == "S") | (state == "D")) & (dur >= 1e6)
    end = (ts + dur)[w][np.argsort(ts[w], kind="stable")]
    period = np.sort(np.diff(end))
    n = int(period.size)
    steps = None
    if n >= 5:
        steps = [int(period[(n + 1) // 2 - 1]), int(period[max(1, int(0.9 * n)) - 1]), n]
    return {"set": {**base, "ranks": len(ranks), "lowest": int(min(ranks)), "span": [t0, t1], "per": per,
                    "steps": steps}, "chunks": chunks}


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part (None where the partial does not apply: run the SQL)."""
    if not made_with(set_part, VERSION, params):
        return None
    return _rows(set_part, params)


def _rows(sp: dict, p: dict) -> list:
    rows = []

    def row(**kw):
        rows.append({c: kw.get(c) for c in COLUMNS})
    if sp["ranks"] is None:
        row(severity="n/a", finding=NA)
        return rows
    t0, t1 = sp["span"]
    span = t1 - t0
    per = sp["per"]
    if len(per) >= 2:
        running = [x[2] for x in per]
        lo, hi = min(running), max(running)
        uneven = hi - lo >= p["spread_warn"] * hi
        text = (f"{len(per)} ranks over {_fixed(span / 1e9, 2)} s: main threads running from {_fixed(lo / 1e9, 2)} s "
                f"to {_fixed(hi / 1e9, 2)} s, a spread of {_fixed(100.0 * (hi - lo) / max(1, hi), 0)}% of the busiest; "
                "the least busy ranks spend the difference waiting for the others" + ("" if uneven else " (balanced)"))
        if sp["steps"] is not None:
            p50, p90, n = sp["steps"]
            text += (f"; step time p50 {_fixed(p50 / 1e6, 1)} ms, p90 {_fixed(p90 / 1e6, 1)} ms over {n} steps "
                     f"(between rank {sp['lowest']}'s waits)")
        row(severity="warning" if uneven else "ok", finding=text, ts=t0, dur=span,
            spread=_round(1.0 * (hi - lo) / max(1, hi), 4))
        for r, pid, run, runnable, waiting in per:
            row(severity="info", finding=(f"rank {r} (pid {pid}): running {_fixed(100.0 * run / span, 0)}%, "
                                          f"runnable {_fixed(100.0 * runnable / span, 0)}%, "
                                          f"waiting {_fixed(100.0 * waiting / span, 0)}%"),
                rank=r, busy_fraction=_round(1.0 * run / span, 4), waiting_fraction=_round(1.0 * waiting / span, 4))
    if sp["ranks"] < 2:
        row(severity="n/a", finding=NA)
    return rows
