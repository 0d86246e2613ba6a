"""rank_straggler (sql/rank_straggler.sql) as a partial computed at conversion, for recordings of
thread states only (the sched family): the part of the SQL that blames each long wait of a rank's
main thread on the other rank running longest during it.

Its inputs: the ranks and their main threads' states as rank_imbalance's (_sched.py's thread_state),
and what the recording holds besides (`Seen`: whether any NCCL call, net slice or counter, memory
slice was written). All of it is over the whole recording, so the partial is the set's part only,
worked out once at the end: the number of ranks and of waits, and per blamed rank the SQL's _tl_rs
numbers (n, waited, all_waits, all_waited, median, running, runnable, disk, sleeping). Each chunk's
part is empty. Bounded: 9 numbers per blamed rank.

No partial (the SQL runs) where rank_imbalance's declines (states not certain, two processes of one
rank, a ranked main thread without states), where the recording has NCCL calls (the collective
rounds), the net family's slices or counters (waits on the network, retransmits during a straggler's
waits), memory slices (reclaim), or DataLoader worker processes (the loader share), which are not
modelled; where the SQL breaks a tie by its row order (two ranks equally busy during a wait, at the
top and busy enough to be blamed; two named ranks with the same waited time; two ranks with the top
share in the "ok" line); where a thread's states overlap (not as _sched.py makes them); for other
parameters than the defaults.
"""
from __future__ import annotations

import numpy as np

from ..catalog import BY_ID
from ...converters.interface import Column
from ._gpu import _fixed, _round, made_with
from ._sched import SchedColumns
from .rank_imbalance import MAX_RANKS, NA, ranked

CHECK = "rank_straggler"
VERSION = 1
COLUMNS = ("severity", "finding", "ts", "dur", "hint", "rank", "rounds_last", "waited_ms", "median_ms", "share",
           "retransmits", "srtt_max_ms", "reclaim_ms")
NOT_MODELLED = ("nccl", "net", "memory")  # categories whose slices the SQL reads beside thread_state
WORKER = "pt_data_worker"


class Seen:
    """Whether the recording has what the partial does not model (one set of category names)."""

    def __init__(self):
        self.cats: set = set()
        self.net_counters = False

    def _cat(self, cat) -> None:
        if isinstance(cat, Column):
            self.cats.update(str(s) for s in cat.strings if str(s) in NOT_MODELLED)
        elif cat is not None and str(cat) in NOT_MODELLED:
            self.cats.add(str(cat))

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None) -> None:
        self._cat(cat)

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        self._cat(cat)

    def group_slices(self, ts, dur, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        pass  # not on thread tracks: the SQL does not read them

    def instant(self, ts, tid, pid, name, cat, args=None) -> None:
        self._cat(cat)

    def counters(self, name, ts, values, pid) -> None:
        if str(name).startswith("net "):
            self.net_counters = True


Collector = (SchedColumns, Seen)


def _cum(ts: np.ndarray, end: np.ndarray, on: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time of the intervals [ts, end) (sorted, not overlapping) selected by `on` before each of t."""
    if not ts.size:
        return np.zeros(t.size, np.int64)
    cum = np.r_[0, np.cumsum(np.where(on, end - ts, 0))]
    i = np.searchsorted(ts, t, "right")
    last = np.maximum(i - 1, 0)
    inside = np.where((i > 0) & on[last], np.clip(t - ts[last], 0, (end - ts)[last]), 0)
    return cum[last] * (i > 0) + inside


def _workers(cols: SchedColumns) -> bool:
    m = cols.model
    return any(t.name == WORKER for t in m.threads.values()) or any(p.name == WORKER for p in m.processes.values())


def part(collectors, starts) -> dict | None:
    cols, seen = collectors
    p = BY_ID[CHECK].defaults()
    if cols.model is None:
        return None
    ranks = ranked(cols)
    if ranks is None or len(ranks) > MAX_RANKS:
        return None
    base = {"version": VERSION, "params": p}
    chunks = [{} for _ in range(len(starts))]
    if len(ranks) == 1 and ("net" in seen.cats or seen.net_counters):
        return None  # one rank's waits on the network are a warning of their own there
    if len(ranks) < 2:
        return {"set": {**base, "ranks": len(ranks), "waits": 0, "per": []}, "chunks": chunks}
    if cols.declined or cols.sched_slices() is None or seen.cats or seen.net_counters or _workers(cols):
        return None
    st = {}
    for r, pid in sorted(ranks.items()):
        s = cols.thread_states(pid)
        if s is None or not s["ts"].size or cols.pid_of(pid) not in (None, pid):
            return None
        keep = s["dur"] > 0
        ts, dur, state = s["ts"][keep], s["dur"][keep], s["state"][keep]
        o = np.argsort(ts, kind="stable")
        ts, dur, state = ts[o], dur[o], state[o]
        if (ts[1:] < (ts + dur)[:-1]).any():
            return None  # overlapping states: the cumulative sums below would not be the SQL's overlaps
        st[r] = (ts, ts + dur, state)
    min_wait = p["min_wait_ms"] * 1e6
    # the waits (_tl_rs_waits): every rank's S/D states >= min_wait
    wr, ws, we = [], [], []
    for r, (ts, end, state) in st.items():
        w = ((state == "S") | (state == "D")) & (end - ts >= min_wait)
        wr.append(np.full(int(w.sum()), r, np.int64))
        ws.append(ts[w])
        we.append(end[w])
    wr, ws, we = np.concatenate(wr), np.concatenate(ws), np.concatenate(we)
    wd = we - ws
    # each other rank's running time during each wait (_tl_rs_busy), the top one (_tl_rs_blame)
    rks = sorted(st)
    busy = np.zeros((len(rks), ws.size), np.int64)
    for j, r in enumerate(rks):
        ts, end, state = st[r]
        run = state == "Running"
        busy[j] = _cum(ts, end, run, we) - _cum(ts, end, run, ws)
        busy[j][wr == r] = 0  # its own waits are not about it
    top = busy.max(axis=0) if ws.size else np.zeros(0, np.int64)
    blamed_ok = (top > 0) & (top >= 0.5 * wd)
    # two ranks equally busy at the top: the lowest (rks ascends; argmax takes the first), as the SQL's order by
    blamed = np.where(blamed_ok, np.array(rks, np.int64)[busy.argmax(axis=0)] if ws.size else 0, -1)
    per = []
    for r in rks:
        b = blamed == r
        if not b.any():
            continue
        others = wr != r
        waits = np.sort(wd[b])
        ts, end, state = st[r]
        doing = []
        for on in (state == "Running", (state == "R") | (state == "R+"), state == "D", state == "S"):
            doing.append(int((_cum(ts, end, on, we[b]) - _cum(ts, end, on, ws[b])).sum()))
        per.append([int(r), int(ranks[r]), int(b.sum()), int(wd[b].sum()), int(others.sum()), int(wd[others].sum()),
                    int(waits[(waits.size + 1) // 2 - 1]), *doing])
    return {"set": {**base, "ranks": len(ranks), "waits": int(ws.size), "per": per}, "chunks": chunks}


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part (None where the partial does not apply: run the SQL)."""
    if not made_with(set_part, VERSION, params):
        return None
    return _rows(set_part, params)


def _rows(sp: dict, p: dict):
    rows = []

    def row(**kw):
        rows.append({c: kw.get(c) for c in COLUMNS})
    if sp["ranks"] < 2:
        row(severity="n/a", finding=NA)
        return rows
    rs = []
    for r, pid, n, waited, all_waits, all_waited, median, running, runnable, disk, sleeping in sp["per"]:
        rs.append((r, pid, n, waited, all_waits, all_waited, median, running, runnable, disk, sleeping,
                   1.0 * waited / max(1, all_waited)))
    named = [x for x in rs if x[2] >= p["min_rounds"] and x[11] >= p["share_warn"]
             and x[2] >= p["rounds_warn"] * x[4] and x[3] >= p["min_wait_ms"] * 1e6 * p["min_rounds"]]
    named.sort(key=lambda x: (-x[3], x[0]))  # the SQL's `order by waited desc, rank`
    for r, pid, n, waited, all_waits, all_waited, median, running, runnable, disk, sleeping, share in named[:3]:
        tot = max(1, running + runnable + disk + 0 + sleeping)
        row(severity="warning", finding=(
            f"rank {r} (pid {pid}) kept the other ranks waiting: {n} of their {all_waits} waits of >= "
            f"{'%g' % p['min_wait_ms']} ms were for it, {_fixed(waited / 1e9, 2)} s in all ({_fixed(100.0 * share, 0)}% "
            f"of all their waiting; median {_fixed(median / 1e6, 1)} ms a round); meanwhile it was running "
            f"{_fixed(100.0 * running / tot, 0)}%, runnable {_fixed(100.0 * runnable / tot, 0)}%, in disk wait "
            f"{_fixed(100.0 * disk / tot, 0)}%, waiting for its DataLoader {_fixed(100.0 * 0 / tot, 0)}%, asleep "
            f"otherwise {_fixed(100.0 * sleeping / tot, 0)}%"),
            rank=r, rounds_last=n, waited_ms=_round(waited / 1e6, 3), median_ms=_round(median / 1e6, 3),
            share=_round(share, 4), retransmits=0, reclaim_ms=_round(0 / 1e6, 3))
    if not named:
        shares = [x[11] for x in rs]
        top = max(shares) if shares else None
        who = str(rs[shares.index(top)][0]) if shares else "-"  # the lowest rank of the top share (rs by rank)
        row(severity="ok", finding=(
            f"{sp['ranks']} ranks, none kept the others waiting: of {sp['waits']} waits of >= "
            f"{'%g' % p['min_wait_ms']} ms, the most on one rank were {_fixed(100.0 * (top or 0), 0)}% (rank {who}; "
            f"a straggler from {_fixed(100.0 * p['share_warn'], 0)}%)"))
    return rows
