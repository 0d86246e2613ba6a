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
    times running runs_us[i] us, asleep (S; every third sleep D) sleep_us, runnable ready_us.
    ranks: pid -> rank (default: 0, 1, ...; None entries: no rank)."""
    n = len(runs_us)
    pids = [1000 * (i + 1) for i in range(n)]
    ranks = {p: i for i, p in enumerate(pids)} if ranks is None else ranks
    b = LogBuilder(ncpu=max(n, 1))
    b.procs(T(1), [{"pid": p, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
                    "threads": [{"tid": p, "comm": "python3"}]} for p in pids])
    b.blocks.append(("meta", {"type": "ranks", "ts": T(2), "processes": [
        {"pid": p, "rank": r, "world_size": n} for p, r in ranks.items() if r is not None]}))
    for i, (p, run) in enumerate(zip(pids, runs_us)):
        t = 10 + (offsets[i] if offsets else 0)
        b.switch(T(t), i, 0, p, prev_tracked=False)  # each CPU's first switch: dropped by trace_processor
        for k in range(cycles):
            b.switch(T(t + run), i, p, 0, prev_state=2 if k % 3 == 2 else 1, next_tracked=False)
            t += run + sleep_us
            b.waking(T(t), i, 0, p, i)
            t += ready_us
            b.switch(T(t), i, 0, p, prev_tracked=False)
        b.flush()
    stop = 10 + max(cycles * (r + sleep_us + ready_us) for r in runs_us) + 500
    return b.write(path, end_block(stop_ts=T(stop)))


def results(tmp_path, raw, split_ms=3):
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    res = convert(raw, str(tmp_path / "set.pftrace"), split=SplitSpec(duration_ns=int(split_ms * 1e6)))
    with open(f"{res.out_path}/index.json") as f:
        index = json.load(f)
    assert len(index["chunks"]) >= 5
    return one, res.out_path, index


@pytest.mark.parametrize("case", ["balanced", "straggler", "one_rank", "no_ranks", "offset_starts"])
def test_rank_imbalance_partial_equals_sql(tmp_path, case):
    runs = {"balanced": [3000, 3000, 3050], "straggler": [2000, 2100, 5000], "one_rank": [3000, 3000],
            "no_ranks": [3000, 3000], "offset_starts": [2000, 4500, 3000]}[case]
    ranks = {"one_rank": {1000: None, 2000: 4}, "no_ranks": {}}.get(case)
    raw = ranked_log(tmp_path / "run.tlraw", runs, ranks=ranks,
                     offsets=[0, 1700, 4200] if case == "offset_starts" else None)
    one, set_dir, index = results(tmp_path, raw)
    assert CHECK in index["partials"]
    status, want = sql_findings(one, CHECK)
    got = set_result(set_dir, CHECK)
    assert got.note == FROM_INDEX
    assert (got.status, got.findings) == (status, want)
    expected = {"balanced": "ok", "straggler": "warning", "offset_starts": "warning"}.get(case, "n/a")
    assert status == expected, want
    if case in ("balanced", "straggler", "offset_starts"):
        head = [f for f in want if f.severity != "info"]
        assert [f.severity for f in head] == [expected] and len(want) == 4, want
        assert "step time p50" in head[0].message and "(between rank 0's waits)" in head[0].message, want
        assert [f.evidence["rank"] for f in want if f.severity == "info"] == [0, 1, 2]
