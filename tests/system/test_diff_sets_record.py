"""`timeline diff` on trace sets and rank directories of real recordings of
tests/diff_workload.py (as in test_diff_record.py): a set of a run against
the same run whole is quiet; two sets that differ in one thing (an extra
sleep per step) have it first; two directories of rank 0/1 traces are
compared rank by rank and pooled, with the ranks only one side has named.
Merging profiles on synthetic data: tests/unit/test_diff_sets.py."""
from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest

from helpers import REPO, require_root, timeline_cmd
from timeline.diff import compare

WORKLOAD = os.path.join(REPO, "tests", "diff_workload.py")
RUNS = {  # name: (RANK, workload options)
    "base": ("0", []),
    "sleep": ("0", ["--extra-sleep-ms", "10"]),
    "base1": ("1", []),
    "again1": ("1", []),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    require_root()
    d = tmp_path_factory.mktemp("diffsets")
    out = {}
    for name, (rank, args) in RUNS.items():
        path = str(d / f"{name}.pftrace")
        cp = timeline_cmd("record", "-q", "--keep-raw", "-o", path, "--", sys.executable, WORKLOAD, *args,
                          timeout=180, env=dict(os.environ, RANK=rank))
        assert cp.returncode == 0, cp.stderr
        assert "done (real-time: True)" in cp.stdout, cp.stdout
        out[name] = path
    for name in ("base", "sleep"):
        cp = timeline_cmd("convert", str(d / f"{name}.tlraw"), "--split", "250ms", "-o", str(d / f"{name}.tlset"))
        assert cp.returncode == 0, cp.stderr
        out[f"{name}.tlset"] = str(d / f"{name}.tlset")
    return out


def test_a_set_against_the_same_run_whole_is_quiet(runs):
    n_chunks = len(json.load(open(os.path.join(runs["base.tlset"], "index.json")))["chunks"])
    assert n_chunks >= 6  # the test is about merging: several chunks hold steps
    report = compare(runs["base.tlset"], runs["base"], checks=False)
    whole = report.candidate["steps"]
    # each chunk boundary inside the steps costs one step, no more
    assert whole - n_chunks <= report.baseline["steps"] < whole, (report.baseline, report.candidate)
    assert report.baseline["step_source"] == "sync" and report.baseline["rank"] == 0
    assert [(r.section, r.name, r.metric) for r in report.significant_rows()] == []
    assert abs(report.step_regression()) < 0.03
    assert any("trace set of" in n for n in report.notes)


def test_two_sets_differing_in_one_thing(runs):
    report = compare(runs["base.tlset"], runs["sleep.tlset"], checks=False)
    first = next(r for r in report.rows if r.section != "step")
    assert (first.section, first.name, first.significant) == ("state", "sleeping", True), \
        [(r.section, r.name, r.impact_ns) for r in report.rows]
    assert 8e6 < first.impact_ns < 12e6 and report.step_regression() > 0.3


def test_sets_through_the_command_with_checks(runs):
    cp = timeline_cmd("diff", runs["base.tlset"], runs["sleep.tlset"], "--format", "json", timeout=300)
    assert cp.returncode == 0, cp.stderr
    doc = json.loads(cp.stdout)
    assert [r["name"] for r in doc["rows"][:3]] == ["p50", "p90", "sleeping"]
    assert any(n.startswith("checks not compared") for n in doc["notes"])  # per-chunk checks are not verdicts


def test_rank_directories(runs, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d, files in ((a, {"base": "r0", "base1": "r1"}), (b, {"sleep": "x", "again1": "y"})):
        d.mkdir()
        for run, name in files.items():
            shutil.copy(runs[run], d / f"{name}.pftrace")
    report = compare(str(a), str(b), checks=False)
    rs = report.ranks
    assert rs.matched_by == "rank" and [r.key for r in rs.compared] == ["rank 0", "rank 1"]
    assert rs.only_baseline == rs.only_candidate == []
    r0, r1 = (r.report for r in rs.compared)
    assert next(r for r in r0.rows if r.section != "step").name == "sleeping" and r0.step_row().significant
    assert [r.name for r in r1.significant_rows()] == []  # rank 1: two runs of one configuration
    pooled = next(r for r in report.rows if r.section != "step")
    assert (pooled.name, pooled.significant) == ("sleeping", True) and report.baseline["steps"] > 60
    # a rank on one side only: said, not compared
    os.remove(b / "y.pftrace")
    cp = timeline_cmd("diff", str(a), str(b), "--no-checks")
    assert cp.returncode == 0, cp.stderr
    assert "only in the baseline: rank 1" in cp.stdout and "rank 0: median step +" in cp.stdout


def test_nvtx_steps_cut_at_chunk_boundaries_are_left_out(libs, tmp_path):
    """NVTX steps (stand-in CUDA libraries, 30 steps of ~12 ms): a range a
    chunk boundary cuts is in two chunks as pieces (timeline_cut); neither
    piece is a step, so the set has fewer steps, none shorter than a whole one."""
    d = os.path.dirname(libs["libcudart.so.12"])
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "tests", "standins"))
    for k in ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "TIMELINE_GPU_SOCKET", "TIMELINE_CUPTI_PATH"):
        env.pop(k, None)
    path = str(tmp_path / "k.pftrace")
    cp = timeline_cmd("record", "-q", "--keep-raw", "-o", path, "--", sys.executable,
                      os.path.join(REPO, "tests", "standins", "gpu_steps.py"), d, "30", "4", "10", env=env)
    assert cp.returncode == 0, cp.stderr
    cp = timeline_cmd("convert", str(tmp_path / "k.tlraw"), "--split", "100ms", "-o", str(tmp_path / "k.tlset"))
    assert cp.returncode == 0, cp.stderr
    tlset = str(tmp_path / "k.tlset")
    n_chunks = len(json.load(open(os.path.join(tlset, "index.json")))["chunks"])
    assert n_chunks >= 3
    from timeline.diff.sets import profile_set
    from timeline.identity import invoking_user
    from timeline.trace_processor import TraceProcessorConfig

    merged, _ = profile_set(tlset, TraceProcessorConfig(), invoking_user(), False, None, "baseline")
    assert merged.steps.source == "range" and merged.steps.label == "step"
    assert 30 - 2 * (n_chunks - 1) <= len(merged.steps) <= 30 - (n_chunks - 1)  # a cut step is in no chunk
    whole_ms = float(np.median(merged.steps.durations))
    assert merged.steps.durations.min() > 0.8 * whole_ms  # no piece of a step counted as one
    report = compare(tlset, path, checks=False)
    p50 = report.step_row()
    assert not p50.significant and abs(p50.relative) < 0.03
    assert [r.name for r in report.significant_rows()] == []
