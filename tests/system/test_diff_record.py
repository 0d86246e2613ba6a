"""`timeline diff` on real recordings of tests/diff_workload.py: two runs of
one configuration are quiet (no significant row), and a run that differs in
one thing (an extra sleep per step, a slow DataLoader, CPU contention) has
that thing as its first row, significant, and a slower step.

The workload runs real-time on one CPU so that other work on this shared
machine changes its steps little; the diff's floors (5 % of the value, 5 %
of the step) do the rest.  The GPU rows (NVTX steps, kernels, copies,
launch delay): the stand-in CUDA libraries (tests/standins/gpu_steps.py).
Unit tests of the statistics: tests/unit/test_diff.py.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from helpers import REPO, require_root, timeline_cmd
from timeline.diff import compare

WORKLOAD = os.path.join(REPO, "tests", "diff_workload.py")
VARIANTS = {
    "base": [], "again": [],
    "sleep": ["--extra-sleep-ms", "10"],
    "loader": ["--slow-loader-ms", "60"],
    "contention": ["--contention"],
}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    require_root()
    d = tmp_path_factory.mktemp("diff")
    out = {}
    for name, args in VARIANTS.items():
        path = str(d / f"{name}.pftrace")
        cp = timeline_cmd("record", "-q", "-o", path, "--", sys.executable, WORKLOAD, *args, timeout=180)
        assert cp.returncode == 0, cp.stderr
        assert "done (real-time: True)" in cp.stdout, cp.stdout  # quiet only when other work cannot delay it
        out[name] = path
    return out


def first_row(report):
    return next(r for r in report.rows if r.section != "step")


def test_same_configuration_is_quiet(traces):
    report = compare(traces["base"], traces["again"], checks=False)
    assert report.baseline["steps"] >= 30 and report.baseline["step_source"] == "sync"
    assert [(r.section, r.name, r.metric) for r in report.significant_rows()] == []
    assert abs(report.step_regression()) < 0.05


@pytest.mark.parametrize("variant, section, name", [
    ("sleep", "state", "sleeping"),
    ("loader", "state", "waiting for DataLoader"),
    ("contention", "state", "runnable"),
])
def test_the_one_difference_comes_first(traces, variant, section, name):
    report = compare(traces["base"], traces[variant], checks=False)
    row = first_row(report)
    assert (row.section, row.name) == (section, name), [(r.section, r.name, r.impact_ns) for r in report.rows]
    assert row.significant and row.impact_ns > 0.05 * report.step_row().baseline
    p90 = report.step_row("p90")
    assert p90.significant and p90.change > 0


def test_cli_json_checks_and_regression_gate(traces):
    cp = timeline_cmd("diff", traces["base"], traces["sleep"], "--format", "json", "--fail-on-regression", "10")
    assert cp.returncode == 1, cp.stderr  # 10 ms more sleep in a ~23 ms step: far over 10 %
    assert "regressed by" in cp.stderr
    doc = json.loads(cp.stdout)
    assert doc["step_time_change"] > 0.2
    assert [r["name"] for r in doc["rows"][:3]] == ["p50", "p90", "sleeping"]
    assert doc["rows"][2]["significant"] is True and doc["only_in_baseline"] == doc["only_in_candidate"] == []
    # the checks ran on both: nothing got worse but what the sleep did (no new cpu or input problem)
    assert all(c["check"] not in ("input_stall", "cpu_contention") or c["change"] != "appeared"
               for c in doc["checks"])
    cp = timeline_cmd("diff", traces["base"], traces["again"], "--fail-on-regression", "10")
    assert cp.returncode == 0, cp.stderr
    assert "step time p50" in cp.stdout and "not significant" in cp.stdout


def test_gpu_steps_kernels_copies_and_launch_delay(libs, tmp_path):
    """NVTX steps, GPU kernels, copies and launch delays (gpu family) from the
    stand-in CUDA libraries: 4 kernels and 10 ms of host work per step against
    8 kernels and 16 ms."""
    d = os.path.dirname(libs["libcudart.so.12"])
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "tests", "standins"))
    for k in ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "TIMELINE_GPU_SOCKET", "TIMELINE_CUPTI_PATH"):
        env.pop(k, None)
    paths = []
    for kernels, sleep_ms in ((4, 10), (8, 16)):
        path = str(tmp_path / f"k{kernels}.pftrace")
        cp = timeline_cmd("record", "-q", "-o", path, "--", sys.executable,
                          os.path.join(REPO, "tests", "standins", "gpu_steps.py"), d, "40", str(kernels),
                          str(sleep_ms), env=env)
        assert cp.returncode == 0, cp.stderr
        paths.append(path)
    report = compare(*paths, checks=False)
    assert report.baseline["step_source"] == "range" and report.baseline["step_label"] == "step"
    assert report.baseline["steps"] >= 20 and not report.only_baseline and not report.only_candidate
    assert first_row(report).name == "sleeping" and first_row(report).significant
    rows = {(r.section, r.name, r.metric): r for r in report.rows}
    calls = rows[("kernel", "standin_kernel", "calls per step")]
    assert (calls.baseline, calls.candidate) == (4, 8)
    assert rows[("memcpy", "HtoD", "bytes per step")].baseline == 65536
    assert rows[("launch", "launch to kernel start", "median")].baseline > 0
    launches = rows[("call", "cudaLaunchKernel", "calls per step")]
    assert (launches.baseline, launches.candidate) == (4, 8), [k for k in rows if k[0] == "call"]
