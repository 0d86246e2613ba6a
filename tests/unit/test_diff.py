"""timeline diff without recordings: the statistics on synthetic samples, the
comparison of synthetic profiles (what is significant, what comes first, what
only one trace has, the checks' changes), the renderers and the command's
one-line errors.  Real recordings: tests/system/test_diff_record.py."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from timeline.checks.catalog import BY_ID
from timeline.checks.runner import CheckResult, Finding, Report
from timeline.diff import compare_profiles, stats
from timeline.diff.profile import STATES, Calls, Profile, Steps, overlap_per_step, per_step
from timeline.diff.render import render_text

MS = 1e6


# ---------------------------------------------------------------- statistics

def test_bootstrap_sees_a_shift_and_not_the_same_distribution():
    rng = np.random.default_rng(1)
    a, b = rng.normal(20, 1, 60), rng.normal(20, 1, 60)
    same = stats.bootstrap_diff(a, b)
    assert same.lo < 0 < same.hi and not same.excludes_zero
    shifted = stats.bootstrap_diff(a, b + 2)
    assert shifted.excludes_zero and shifted.lo > 0 and 1 < shifted.diff < 3


def test_bootstrap_is_repeatable_and_needs_samples():
    rng = np.random.default_rng(2)
    a, b = rng.exponential(5, 200), rng.exponential(6, 200)
    assert stats.bootstrap_diff(a, b) == stats.bootstrap_diff(a, b)  # fixed seed
    few = stats.bootstrap_diff([1.0, 2.0], [5.0, 6.0, 7.0])
    assert few.lo is None and not few.excludes_zero and few.diff == 4.5
    assert np.isnan(stats.bootstrap_diff([], [1.0]).diff)
    big = stats.bootstrap_diff(np.arange(50_000.0), np.arange(50_000.0) + 10_000)  # thinned, still right
    assert big.excludes_zero and abs(big.diff - 10_000) < 100


def test_bootstrap_false_alarms_are_rare():
    """Same distribution, 200 draws: the 99 % interval leaves out zero about 1 % of the time."""
    rng = np.random.default_rng(3)
    alarms = sum(stats.bootstrap_diff(rng.normal(10, 2, 40), rng.normal(10, 2, 40)).excludes_zero
                 for _ in range(200))
    assert alarms <= 8


def test_proportions():
    assert stats.proportion_diff(50, 1000, 150, 1000).excludes_zero
    assert not stats.proportion_diff(50, 1000, 55, 1000).excludes_zero
    assert stats.proportion_diff(0, 0, 5, 10).lo is None


def test_significance_needs_the_floor_too():
    iv = stats.Interval(0.5, 0.2, 0.8)
    assert stats.significant(iv, 0.4) and not stats.significant(iv, 0.6)
    assert not stats.significant(stats.Interval(0.5, -0.1, 0.8), 0.0)


# ---------------------------------------------------------- per-step helpers

def test_per_step_and_overlap():
    steps = Steps("sync", "x", np.array([0, 10, 20]), np.array([10, 20, 30]))
    assert per_step(np.array([1, 5, 12, 35, -1]), np.array([1, 2, 3, 4, 5]), steps).tolist() == [3, 3, 0]
    # intervals [5, 15) and [18, 26): 5 in step 0, 5 + 2 in step 1, 6 in step 2
    assert overlap_per_step(np.array([5, 18]), np.array([10, 8]), steps).tolist() == [5, 7, 6]


# ------------------------------------------------------- synthetic profiles

def profile(seed: int, n: int = 40, extra_sleep_ms: float = 0.0, kernel_ms: float | None = None,
            steps: bool = True, checks=None, python: dict | None = None) -> Profile:
    """A run of n steps: 3 ms running, 20 ms (+extra) sleeping, a bit runnable, one cudaMemcpy per step."""
    rng = np.random.default_rng(seed)
    states = {"running": rng.normal(3, 0.3, n) * MS, "runnable": rng.exponential(0.3, n) * MS,
              "sleeping": (20 + extra_sleep_ms + rng.normal(0, 0.05, n)) * MS,
              "disk wait": np.zeros(n), "waiting for DataLoader": rng.exponential(0.1, n) * MS}
    dur = sum(states.values())
    starts = np.concatenate(([0], np.cumsum(dur)[:-1])).astype(np.int64)
    st = Steps("sync", "cudaMemcpy", starts, starts + dur.astype(np.int64))
    memcpy = rng.normal(10_000, 1000, n)
    apis = Calls({"cudaMemcpy": memcpy}, {"cudaMemcpy": np.ones(n)}, {"cudaMemcpy": memcpy})
    kernels = Calls()
    if kernel_ms is not None:
        k = rng.normal(kernel_ms, kernel_ms / 50, 3 * n) * MS
        kernels = Calls({"gemm": k}, {"gemm": np.full(n, 3.0)}, {"gemm": k.reshape(n, 3).sum(axis=1)})
    if not steps:
        st = Steps("run", "steady state", np.array([0]), np.array([int(dur.sum())]))
        states = {k: np.array([v.sum()]) for k, v in states.items()}
        apis = Calls(apis.durs, {"cudaMemcpy": np.array([float(n)])}, {"cudaMemcpy": np.array([memcpy.sum()])})
    have = {"steps": steps, "main thread": True, "CUDA calls": True, "GPU activity": kernel_ms is not None,
            "Python stacks": python is not None, "checks": checks is not None}
    ctx = {"trace": f"run{seed}.pftrace", "command": "python train.py", "machine": "x86_64", "duration_s": 1.0,
           "steps": n if steps else 0, "step_source": st.source, "step_label": st.label}
    return Profile(f"run{seed}", ctx, {}, st, states, apis, kernels, {"H2D": np.full(n, 4096.0)}, "calls",
                   np.zeros(0), python or {}, "samples" if python else None, checks, have)


def test_same_configuration_is_quiet():
    for seed in range(0, 20, 2):  # ten pairs of draws of one configuration
        report = compare_profiles(profile(seed), profile(seed + 1))
        assert report.significant_rows() == [], [(r.name, r.metric) for r in report.significant_rows()]


def test_extra_sleep_comes_first():
    report = compare_profiles(profile(1), profile(2, extra_sleep_ms=5))
    assert [r.name for r in report.rows[:3]] == ["p50", "p90", "sleeping"]
    p50, sleep = report.rows[0], report.rows[2]
    assert p50.significant and 4 * MS < p50.change < 6 * MS and 0.15 < report.step_regression() < 0.30
    assert sleep.significant and 4.5 * MS < sleep.impact_ns < 5.5 * MS and sleep.ci[0] > 0
    assert sleep.share_candidate > sleep.share_baseline
    assert [r.name for r in report.significant_rows()] == ["p50", "p90", "sleeping"]


def test_slower_kernel_and_what_only_one_trace_has():
    report = compare_profiles(profile(1, kernel_ms=2), profile(2, kernel_ms=3))
    kernel = [r for r in report.rows if r.section == "kernel" and r.significant]
    assert {r.metric for r in kernel} == {"time per step", "median"}
    assert kernel[0].metric == "time per step" and 2.5 * MS < kernel[0].impact_ns < 3.5 * MS
    report = compare_profiles(profile(1), profile(2, kernel_ms=2))
    assert report.only_candidate == ["GPU activity"] and report.only_baseline == []
    assert not [r for r in report.rows if r.section == "kernel"]


def test_without_steps_it_compares_rates_and_says_so():
    report = compare_profiles(profile(1, steps=False), profile(2))
    assert report.rows[0].name == "run" and report.rows[0].significant is None
    assert any("only one trace marks steps" in n for n in report.notes)
    assert report.settings["per"] == "second of steady state"
    # one rate a side: no interval; the calls' durations are still distributions
    assert all(r.significant is None for r in report.rows if r.metric != "median")
    calls = next(r for r in report.rows if r.name == "cudaMemcpy" and r.metric == "calls per s")
    assert calls.baseline == pytest.approx(calls.candidate, rel=0.05)  # per second of either run: ~43/s


def test_python_function_whose_share_grew():
    base = {"forward (model.py)": 600, "load (data.py)": 100, "log (train.py)": 20}
    cand = {"forward (model.py)": 300, "load (data.py)": 400, "log (train.py)": 20}
    report = compare_profiles(profile(1, python=base), profile(2, python=cand))
    py = [r for r in report.rows if r.section == "python"]
    assert [(r.name, r.significant) for r in py[:2]] == [("load (data.py)", True), ("forward (model.py)", True)]
    assert py[0].change == pytest.approx(400 / 720 - 100 / 720) and py[0].impact_ns > 0 > py[1].impact_ns
    assert [r.significant for r in py if r.name == "log (train.py)"] == [False]
    # samples in one trace only: not compared, and said so
    report = compare_profiles(profile(1, python=base), profile(2))
    assert report.only_baseline == ["Python stacks"] and not [r for r in report.rows if r.section == "python"]


def test_samples_without_a_stack_are_apart_from_the_functions():
    """A run with many samples taken without a Python stack: the bucket counts in the
    shares, but is no function row (it would be the top 'slower' one); it has its own
    row, in JSON and on a line under the table, with its reason."""
    from rich.console import Console
    from timeline.python_buckets import NO_FRAME, WITHOUT_STACK

    base = {"forward (model.py)": 600, "load (data.py)": 100, NO_FRAME: 20, f"{NO_FRAME} (odd.py)": 10}
    cand = {"forward (model.py)": 600, "load (data.py)": 100, NO_FRAME: 700, f"{NO_FRAME} (odd.py)": 10}
    report = compare_profiles(profile(1, python=base), profile(2, python=cand))
    py = {r.name: r for r in report.rows if r.section == "python"}
    assert NO_FRAME not in py and f"{NO_FRAME} (odd.py)" in py  # a function of that name, with a file, is one
    assert py["forward (model.py)"].baseline == pytest.approx(600 / 730)  # the bucket counts in the shares
    (bucket,) = report.without_stack
    assert bucket.name == NO_FRAME and bucket.without_stack == WITHOUT_STACK[NO_FRAME] and bucket.significant
    assert bucket.baseline == pytest.approx(20 / 730) and bucket.candidate == pytest.approx(700 / 1410)
    assert bucket not in report.significant_rows()
    doc = json.loads(json.dumps(report.to_json()))
    assert NO_FRAME not in [r["name"] for r in doc["rows"]]
    (js,) = doc["python_without_stack"]
    assert js["name"] == NO_FRAME and js["without_stack"] == WITHOUT_STACK[NO_FRAME] and js["candidate"] > 0.49
    con = Console(record=True, width=200, highlight=False)
    render_text(report, con)
    text = con.export_text()
    assert not re.search(rf"Python: {re.escape(NO_FRAME)}\s+\d", text), text  # no table row of it
    line = next(ln for ln in text.splitlines() if ln.lstrip("* ").startswith(f"{NO_FRAME}:"))
    assert "2.7% -> 49.6%" in line and line.endswith(WITHOUT_STACK[NO_FRAME]), line
    # none recorded: no line, an empty list
    plain = compare_profiles(profile(1, python={"forward (model.py)": 5}), profile(2, python={"forward (model.py)": 5}))
    assert plain.without_stack == [] and plain.to_json()["python_without_stack"] == []


def _report(statuses: dict) -> Report:
    results = []
    for cid, status in statuses.items():
        findings = [Finding(status, f"{cid} is {status}")] if status != "not recorded" else []
        results.append(CheckResult(BY_ID[cid], status, findings, {}))
    return Report("t", "wasm", 0, 1, {}, results)


def test_check_changes():
    base = _report({"cpu_contention": "ok", "input_stall": "warning", "sync_hotspots": "warning",
                    "block_io": "not recorded", "hang": "ok"})
    cand = _report({"cpu_contention": "error", "input_stall": "ok", "sync_hotspots": "error",
                    "block_io": "warning", "hang": "info"})
    report = compare_profiles(profile(1, checks=base), profile(2, checks=cand))
    got = [(c.check, c.change, c.baseline, c.candidate) for c in report.checks]
    assert got == [("cpu_contention", "appeared", "ok", "error"), ("sync_hotspots", "changed", "warning", "error"),
                   ("input_stall", "vanished", "warning", "ok")]
    assert report.checks[0].finding == "cpu_contention is error"


def test_json_and_text():
    report = compare_profiles(profile(1), profile(2, extra_sleep_ms=5))
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["rows"][2]["name"] == "sleeping" and doc["rows"][2]["significant"] is True
    assert doc["rows"][2]["interval"][0] > 0 and set(STATES) >= {r["name"] for r in doc["rows"] if r["section"] == "state"}
    from rich.console import Console

    con = Console(record=True, width=140, highlight=False)
    render_text(report, con)
    text = con.export_text()
    lines = text.splitlines()
    first = next(i for i, ln in enumerate(lines) if "main thread" in ln)
    assert "sleeping" in lines[first] and lines[first].lstrip().startswith("*")
    assert "median step" in text and "slower" in text


# ------------------------------------------------------------------- command

def test_bad_inputs_are_one_line(tmp_path):
    from timeline.cli import main

    notrace = tmp_path / "notes.txt"
    notrace.write_text("hello\n")
    runner = CliRunner()
    for args in ([str(tmp_path / "missing.pftrace"), str(notrace)], [str(notrace), str(notrace)]):
        res = runner.invoke(main, ["diff", *args])
        assert res.exit_code == 2, res.output
        assert len(res.output.strip().splitlines()) == 1 and "timeline: error:" in res.output
    res = runner.invoke(main, ["diff", str(notrace), str(notrace), "--min-change", "-1"])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
