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
