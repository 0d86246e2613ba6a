"""timeline diff over trace sets and rank directories, without recordings:
merging chunk profiles (synthetic), the rank matching, the per-rank lines
and the one-line errors for inputs that are neither.  Real recordings:
tests/system/test_diff_sets_record.py."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from timeline.diff import RankDiff, RankSet, compare_profiles, merge_profiles
from timeline.diff.profile import Calls, Profile, Steps
from timeline.diff.render import render_text
from timeline.diff.sets import input_kind, rank_keys
from timeline.errors import UserError

MS = 1e6


def run(seed: int, n: int = 60, extra_sleep_ms: float = 0.0, rank=None) -> Profile:
    """n sync steps: ~3 ms running, 20 ms (+extra) sleeping, one cudaMemcpy each, samples in two functions."""
    rng = np.random.default_rng(seed)
    states = {"running": rng.normal(3, 0.3, n) * MS, "sleeping": (20 + extra_sleep_ms + rng.normal(0, 0.05, n)) * MS}
    dur = sum(states.values())
    starts = np.concatenate(([0], np.cumsum(dur)[:-1])).astype(np.int64) + seed * 10**12
    memcpy = rng.normal(10_000, 1000, n)
    apis = Calls({"cudaMemcpy": memcpy}, {"cudaMemcpy": np.ones(n)}, {"cudaMemcpy": memcpy})
    have = {"steps": True, "main thread": True, "CUDA calls": True, "GPU activity": False, "Python stacks": True,
            "checks": False}
    ctx = {"trace": f"run{seed}", "command": "python train.py", "machine": "x86_64", "duration_s": 1.0,
           "steps": n, "step_source": "sync", "step_label": "cudaMemcpy", "rank": rank}
    return Profile(f"run{seed}", ctx, {"sched": True}, Steps("sync", "cudaMemcpy", starts, starts + dur.astype(np.int64)),
                   states, apis, Calls(), {"H2D": np.full(n, 4096.0)}, "calls", rng.normal(5000, 100, n),
                   {"step (train.py)": 10 * n, "load (data.py)": n}, "samples", None, have)


def chunks_of(p: Profile, cuts: list[int]) -> list[Profile]:
    """The profile as the chunks a trace set would give: steps split at the
    given indices, the step at each cut left out (it crossed the boundary)."""
    out, lo = [], 0
    for hi in cuts + [len(p.steps)]:
        sl = slice(lo, hi)
        durs = p.apis.durs["cudaMemcpy"][sl]
        out.append(Profile(p.path, {**p.context, "steps": hi - lo}, p.families,
                           Steps("sync", "cudaMemcpy", p.steps.starts[sl], p.steps.ends[sl]),
                           {k: v[sl] for k, v in p.states.items()},
                           Calls({"cudaMemcpy": durs}, {"cudaMemcpy": p.apis.count["cudaMemcpy"][sl]},
                                 {"cudaMemcpy": p.apis.time["cudaMemcpy"][sl]}),
                           Calls(), {k: v[sl] for k, v in p.memcpy.items()}, "calls", p.launch_delay[sl],
                           {k: v // (len(cuts) + 1) for k, v in p.python.items()}, "samples", None, dict(p.have)))
        lo = hi + 1
    return out


def test_merge_puts_steps_and_per_step_arrays_end_to_end():
    parts = chunks_of(run(1), [20, 40])
    parts[1].apis.durs["cudaFree"] = np.array([7.0, 9.0])  # a call only one chunk makes
    parts[1].apis.count["cudaFree"] = np.r_[np.ones(2), np.zeros(len(parts[1].steps) - 2)]
    parts[1].apis.time["cudaFree"] = np.r_[7.0, 9.0, np.zeros(len(parts[1].steps) - 2)]
    m = merge_profiles(parts, "run.tlset")
    p = m.profile
    n = sum(len(c.steps) for c in parts)
    assert n == 58 and len(p.steps) == n and m.used == [0, 1, 2] and m.left_out == []
    assert np.all(np.diff(p.steps.starts) > 0)  # time order kept
    assert np.array_equal(p.states["sleeping"], np.concatenate([c.states["sleeping"] for c in parts]))
    # zeros for the chunks without the call, its durations pooled
    assert p.apis.count["cudaFree"].tolist() == [0] * 20 + [1, 1] + [0] * 36
    assert p.apis.durs["cudaFree"].tolist() == [7.0, 9.0] and len(p.apis.durs["cudaMemcpy"]) == n
    assert len(p.memcpy["H2D"]) == n and len(p.launch_delay) == n
    assert p.python == {"step (train.py)": 3 * 200, "load (data.py)": 3 * 20}  # counts added
    assert p.context["trace"] == "run.tlset" and p.context["steps"] == n and p.context["duration_s"] == 3.0


def test_chunks_cut_otherwise_are_left_out():
    parts = chunks_of(run(1), [20, 40])
    startup = chunks_of(run(1), [20, 40])[0]
    startup.steps = Steps("run", "whole trace", np.array([0]), np.array([10**9]))
    startup.states = {"running": np.array([5e8])}
    startup.have = {**startup.have, "steps": False}
    m = merge_profiles([startup] + parts, "run.tlset")
    assert m.used == [1, 2, 3] and m.left_out == [0]
    assert len(m.profile.steps) == 58 and m.profile.steps.source == "sync"
    # no chunk marks steps: each is one 'run' step, compared per second
    m = merge_profiles([startup, startup], "x.tlset")
    assert m.used == [0, 1] and not m.profile.have["steps"] and len(m.profile.steps) == 2


def test_merged_set_against_the_whole_run_is_quiet_and_a_change_comes_first():
    whole = run(1)
    merged = merge_profiles(chunks_of(whole, [15, 30, 45]), "base.tlset").profile
    report = compare_profiles(merged, whole)
    assert report.significant_rows() == [], [(r.name, r.metric) for r in report.significant_rows()]
    assert abs(report.step_regression()) < 0.01
    slower = merge_profiles(chunks_of(run(2, extra_sleep_ms=5), [15, 30, 45]), "sleep.tlset").profile
    report = compare_profiles(merged, slower)
    assert [r.name for r in report.significant_rows()] == ["p50", "p90", "sleeping"]
    assert 4.5 * MS < report.rows[2].impact_ns < 5.5 * MS


def test_rank_keys():
    assert rank_keys([run(1, rank=1), run(2, rank=0)]) == ["rank 1", "rank 0"]
    assert rank_keys([run(1, rank=0), run(2, rank=0)]) is None  # not told apart: file names
    assert rank_keys([run(1, rank=0), run(2)]) is None


def test_per_rank_lines_and_json():
    base, cand = run(1, rank=0), run(2, extra_sleep_ms=5, rank=0)
    report = compare_profiles(merge_profiles([base], "a").profile, merge_profiles([cand], "b").profile)
    report.ranks = RankSet("rank", [RankDiff("rank 0", "a/r0.pftrace", "b/r0.pftrace", compare_profiles(base, cand))],
                           ["rank 1"], ["rank 2"])
    from rich.console import Console

    con = Console(record=True, width=200, highlight=False)
    render_text(report, con)
    text = con.export_text()
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("rank 0:"))
    assert "median step +2" in line and "main thread: sleeping" in line
    assert "only in the baseline: rank 1" in text and "only in the candidate: rank 2" in text
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["ranks"]["matched_by"] == "rank" and doc["ranks"]["only_in_baseline"] == ["rank 1"]
    assert doc["ranks"]["compared"][0]["rank"] == "rank 0" and doc["ranks"]["compared"][0]["step_time_change"] > 0.15


def test_input_kinds_and_one_line_errors(tmp_path):
    (tmp_path / "t.pftrace").write_bytes(b"x")
    (tmp_path / "set.tlset").mkdir()
    (tmp_path / "set.tlset" / "index.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    assert input_kind(str(tmp_path / "t.pftrace")) == "trace"
    assert input_kind(str(tmp_path / "set.tlset")) == "set"
    assert input_kind(str(tmp_path)) == "ranks"
    for bad in ("empty", "notes", "missing"):
        with pytest.raises(UserError):
            input_kind(str(tmp_path / bad))
    from timeline.cli import main

    runner = CliRunner()
    for args, said in (([tmp_path / "empty", tmp_path / "t.pftrace"], "neither a trace set index"),
                       ([tmp_path, tmp_path / "t.pftrace"], "per-rank traces on both sides"),
                       ([tmp_path / "set.tlset", tmp_path], "per-rank traces on both sides"),
                       ([tmp_path / "set.tlset", tmp_path / "set.tlset"], "index")):
        res = runner.invoke(main, ["diff", *map(str, args), "--no-checks"])
        assert res.exit_code == 2, res.output
        assert len(res.output.strip().splitlines()) == 1 and said in res.output, res.output


def test_merged_rank_ignores_chunks_that_show_none():
    """A set's chunk whose process label's main thread did nothing in it shows no
    rank; the set keeps the rank the other chunks show, and two ranks give none."""
    parts = chunks_of(run(1, rank=0), [20, 40])
    parts[2].context["rank"] = None
    assert merge_profiles(parts, "run.tlset").profile.context["rank"] == 0
    parts[1].context["rank"] = 1
    assert merge_profiles(parts, "run.tlset").profile.context["rank"] is None
