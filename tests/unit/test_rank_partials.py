"""rank_imbalance's partial (timeline/checks/partials/rank_imbalance.py): the same synthetic raw log
(ranked processes, from a "ranks" meta as the recorder writes it, on their own CPUs) converted as one
trace (the SQL's findings through the wasm trace_processor) and as a set split every few ms, the
states crossing the chunk boundaries (the set's findings from its index)."""
from __future__ import annotations

import json

import pytest

from rawlog_factory import LogBuilder, T, end_block
from test_check_partials import set_result, sql_findings
from timeline.checks.traceset import FROM_INDEX
from timeline.converters import convert
from timeline.converters.trace_set import SplitSpec

CHECK = "rank_imbalance"


def ranked_log(path, runs_us, ranks=None, cycles=12, sleep_us=2000, ready_us=150, offsets=None) -> str:
    """One process per entry of runs_us (pid 1000, 2000, ...), its main thread on CPU i: `cycles`
    times running about runs_us[i] us (a jitter per cycle, so the step periods differ; every fourth
    cycle preempted (R+) for a while), asleep (S; every third sleep D) sleep_us (rank 0's sixth and
    eighth sleeps: exactly 1 ms, 1 ns less: a step wait and not), runnable ready_us.
    ranks: pid -> rank (default: 0, 1, ...; None entries: no rank)."""
    n = len(runs_us)
    pids = [1000 * (i + 1) for i in range(n)]
    ranks = {p: i for i, p in enumerate(pids)} if ranks is None else ranks
    b = LogBuilder(ncpu=max(n, 1))
    b.procs(T(1), [{"pid": p, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
                    "threads": [{"tid": p, "comm": "python3"}]} for p in pids])
    b.blocks.append(("meta", {"type": "ranks", "ts": T(2), "processes": [
        {"pid": p, "rank": r, "world_size": n} for p, r in ranks.items() if r is not None]}))
    stop = 0
    for i, (p, run) in enumerate(zip(pids, runs_us)):
        t = T(10 + (offsets[i] if offsets else 0))
        b.switch(t, i, 0, p, prev_tracked=False)  # each CPU's first switch: dropped by trace_processor
        for k in range(cycles):
            t += (run + (k * k * 131 + i * 53) % 977) * 1000 + k
            if k % 4 == 3:  # preempted by an untracked task, then back
                b.switch(t, i, p, 0, prev_state=0x100, next_tracked=False)
                t += 300_000
                b.switch(t, i, 0, p, prev_tracked=False)
                t += 200_000
            b.switch(t, i, p, 0, prev_state=2 if k % 3 == 2 else 1, next_tracked=False)
            t += {(0, 5): 1_000_000, (0, 7): 999_999}.get((i, k), sleep_us * 1000 + 7 * k)
            b.waking(t, i, 0, p, i)
            t += ready_us * 1000
            b.switch(t, i, 0, p, prev_tracked=False)
        b.flush()
        stop = max(stop, t)
    return b.write(path, end_block(stop_ts=stop + 500_000))


def results(tmp_path, raw, split_ms=3):
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    res = convert(raw, str(tmp_path / "set.pftrace"), split=SplitSpec(duration_ns=int(split_ms * 1e6)))
    with open(f"{res.out_path}/index.json") as f:
        index = json.load(f)
    assert len(index["chunks"]) >= 5
    return one, res.out_path, index


CASES = {"balanced": [3000, 3000, 3050], "straggler": [2000, 2100, 5000], "one_rank": [3000, 3000],
         "no_ranks": [3000, 3000], "offset_starts": [2000, 4500, 3000], "four_steps": [3000, 3000, 3000],
         "five_steps": [3000, 3000, 3000]}


@pytest.mark.parametrize("case", list(CASES))
def test_rank_imbalance_partial_equals_sql(tmp_path, case):
    runs = CASES[case]
    ranks = {"one_rank": {1000: None, 2000: 4}, "no_ranks": {}}.get(case)
    # rank 0's waits >= 1 ms: 5 (4 step periods, no step time shown), 6 (5 periods: shown)
    cycles = {"four_steps": 5, "five_steps": 6}.get(case, 12)
    raw = ranked_log(tmp_path / "run.tlraw", runs, ranks=ranks, cycles=cycles,
                     offsets=[0, 1700, 4200] if case == "offset_starts" else None)
    one, set_dir, index = results(tmp_path, raw)
    assert CHECK in index["partials"]
    status, want = sql_findings(one, CHECK)
    got = set_result(set_dir, CHECK)
    assert got.note == FROM_INDEX
    assert (got.status, got.findings) == (status, want)
    expected = {"straggler": "warning", "offset_starts": "warning", "one_rank": "n/a", "no_ranks": "n/a"}.get(case, "ok")
    assert status == expected, want
    if expected != "n/a":
        head = [f for f in want if f.severity != "info"]
        assert [f.severity for f in head] == [expected] and len(want) == 4, want
        steps = "step time p50" in head[0].message and "(between rank 0's waits)" in head[0].message
        assert steps == (case != "four_steps"), want
        assert [f.evidence["rank"] for f in want if f.severity == "info"] == [0, 1, 2]


def test_rank_imbalance_two_processes_one_rank_declines(tmp_path):
    """The SQL groups by rank: two processes of one rank are one row there; the partial declines."""
    raw = ranked_log(tmp_path / "run.tlraw", [3000, 3000, 3000], ranks={1000: 0, 2000: 1, 3000: 1})
    one, set_dir, index = results(tmp_path, raw)
    assert CHECK not in index.get("partials", {})
    got = set_result(set_dir, CHECK)
    assert got.note != FROM_INDEX


STRAGGLER = "rank_straggler"


def sync_log(path, n, rounds, plan, ranks=None) -> str:
    """n ranked processes (pid 1000, 2000, ...; main thread on CPU i) in synchronous rounds: each
    computes plan(k, i) (segments ("run" | "R+" | "D" | "S", us): running, preempted, in disk wait,
    a short sleep), then sleeps (S) until the slowest is done, 0.3 ms more; woken, runnable a
    moment, next round (every fourth round's wait in D). ranks: pid -> rank (default 0, 1, ...)."""
    pids = [1000 * (i + 1) for i in range(n)]
    ranks = {p: i for i, p in enumerate(pids)} if ranks is None else ranks
    b = LogBuilder(ncpu=n)
    b.procs(T(1), [{"pid": p, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
                    "threads": [{"tid": p, "comm": "python3"}]} for p in pids])
    b.blocks.append(("meta", {"type": "ranks", "ts": T(2), "processes": [
        {"pid": p, "rank": r} for p, r in ranks.items() if r is not None]}))
    t = [T(10) + 3 * i for i in range(n)]
    for i, p in enumerate(pids):
        b.switch(t[i], i, 0, p, prev_tracked=False)  # dropped by trace_processor
        t[i] += 100_000
        b.switch(t[i], i, 0, p, prev_tracked=False)
    for k in range(rounds):
        for i, p in enumerate(pids):
            for what, us in plan(k, i):
                ns = round(us * 1000) if what == "S=" else us * 1000 + 11 * k + i  # S=: exactly that long
                what = what.rstrip("=")
                if what == "run":
                    t[i] += ns
                    continue
                b.switch(t[i], i, p, 0, prev_state={"R+": 0x100, "D": 2, "S": 1}[what], next_tracked=False)
                t[i] += ns
                if what != "R+":
                    b.waking(t[i], i, 0, p, i)
                    t[i] += 20_000
                b.switch(t[i], i, 0, p, prev_tracked=False)
            b.switch(t[i], i, p, 0, prev_state=2 if k % 4 == 1 else 1, next_tracked=False)  # some in D
        end = max(t) + 300_000
        for i, p in enumerate(pids):
            b.waking(end + 7_000 * i, i, 0, p, i)
            t[i] = end + 50_000 + 10_000 * i
            b.switch(t[i], i, 0, p, prev_tracked=False)
        b.flush()
    return b.write(path, end_block(stop_ts=max(t) + 500_000))


def _straggle(k, i):
    # rank 2 computes longest in most rounds (with a preemption and a disk wait); in every fifth
    # round rank 1 does; in some, rank 2 sleeps 2 ms first: it runs some 41% of the others' waits
    # then, not blamed (the SQL's half)
    if i == 0 and k in (3, 6):  # waits of exactly 1 ms (one) and 1 ns less (not one)
        return [("run", 1200), ("S=", 1000 if k == 3 else 999.999), ("run", 200)]
    if i == 2 and k % 5 == 2:
        return [("run", 500), ("S", 2000), ("run", 900)]
    if (i == 2) != (k % 5 == 4 and i in (1, 2)):
        return [("run", 3000 + 97 * (k % 4)), ("R+", 400), ("run", 500), ("D", 700), ("run", 300)]
    return [("run", 1500 + 53 * ((k + i) % 3)), ("S", 200), ("run", 200)]


def _rotate(k, i):
    # the slowest rank changes every round: no straggler
    return [("run", 3000 if k % 3 == i else 1600 + 40 * i)]


def _second(k, i):
    return [("run", 3500 + 31 * k if i == 1 else 1500)]


PLANS = {"straggler": (3, 15, _straggle), "rotating": (3, 15, _rotate), "two_ranks": (2, 8, _second),
         "few_rounds": (3, 2, _straggle)}


@pytest.mark.parametrize("case", list(PLANS) + ["one_rank", "no_ranks"])
def test_rank_straggler_partial_equals_sql(tmp_path, case):
    if case in ("one_rank", "no_ranks"):
        n, rounds, plan = 3, 10, _straggle
        ranks = {1000: None, 2000: 5, 3000: None} if case == "one_rank" else {}
    else:
        (n, rounds, plan), ranks = PLANS[case], None
    raw = sync_log(tmp_path / "run.tlraw", n, rounds, plan, ranks=ranks)
    one, set_dir, index = results(tmp_path, raw, split_ms=2 if case == "few_rounds" else 3)
    assert STRAGGLER in index["partials"]
    status, want = sql_findings(one, STRAGGLER)
    got = set_result(set_dir, STRAGGLER)
    assert got.note == FROM_INDEX
    assert (got.status, got.findings) == (status, want)
    expected = {"straggler": "warning", "two_ranks": "warning", "one_rank": "n/a", "no_ranks": "n/a"}.get(case, "ok")
    assert status == expected, want
    if case == "straggler":
        assert [f.evidence["rank"] for f in want] == [2], want
        assert "disk wait 0%" not in want[0].message and "runnable 0%" not in want[0].message, want


def _tie(k, i):
    # rank 0 sleeps 1.2 ms in its step while ranks 1 and 2 both run throughout: equally busy
    return [("run", 300), ("S", 1200), ("run", 300)] if i == 0 else [("run", 3000)]


def test_rank_straggler_blame_ties_go_to_the_lowest_rank(tmp_path):
    """Two ranks running all through a wait: the SQL's `order by busy desc, other` blames the lower
    rank, and so does the partial (before 2026-11-27 the engine's row order picked: no partial)."""
    raw = sync_log(tmp_path / "run.tlraw", 3, 8, _tie)
    one, set_dir, index = results(tmp_path, raw)
    assert STRAGGLER in index["partials"]
    status, want = sql_findings(one, STRAGGLER)
    got = set_result(set_dir, STRAGGLER)
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)


def test_rank_straggler_share_ties_name_the_lowest_rank(tmp_path):
    """Two ranks taking turns: every wait of each is blamed on the other, both have 100% of the
    other's waiting; the SQL's `order by share desc, rank limit 1` names rank 0, as the partial does."""
    raw = sync_log(tmp_path / "run.tlraw", 2, 8, _rotate)
    one, set_dir, index = results(tmp_path, raw)
    status, want = sql_findings(one, STRAGGLER)
    assert status == "ok" and "were 100% (rank 0;" in want[0].message, want
    got = set_result(set_dir, STRAGGLER)
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)


@pytest.mark.parametrize("what", ["nccl", "net", "memory", "net counter", "worker", "net one rank"])
def test_rank_straggler_declines_on_what_it_does_not_model(tmp_path, monkeypatch, what):
    """NCCL rounds, the network, memory reclaim, DataLoader workers: the SQL reads them, the partial
    does not model them and leaves the check to the SQL."""
    from timeline.checks.partials import rank_straggler as rs
    from timeline.converters.interface import Column
    seen = rs.Seen()
    if what == "net counter":
        seen.counters("net 10.0.0.1:1 \u2194 10.0.0.2:2 srtt_ms", [1], [1.0], 1000)
        assert seen.net_counters
    elif what != "worker":
        cat = what.split()[0]
        seen.slices([1, 2], [1, 1], [1000, 1000], None, "x", Column("cat", "str", [0, 1], ["python", cat]))
        assert seen.cats == {cat}
    monkeypatch.setattr(rs, "Seen", lambda: seen)
    monkeypatch.setattr(rs, "Collector", (rs.SchedColumns, rs.Seen))
    if what == "worker":
        monkeypatch.setattr(rs, "WORKER", "python3")  # the ranks' own processes' name stands in
    raw = sync_log(tmp_path / "run.tlraw", 3, 15, _straggle,
                   ranks={1000: None, 2000: 1, 3000: None} if what == "net one rank" else None)
    one, set_dir, index = results(tmp_path, raw)
    assert STRAGGLER not in index["partials"] and CHECK in index["partials"]
