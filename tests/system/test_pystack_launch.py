"""Python stacks at kernel launches, one in --py-launch-every per thread.

tests/pystack_target.py calls the real libcudart's cudaLaunchKernel (no GPU:
it returns an error, after the uprobes fired) LAUNCHES times from one line
of outer() -> middle() -> inner().  With --py-launch-every EVERY, the
thread's 1st, EVERY+1st, ... launches get the stack: LAUNCHES / EVERY
records, each the exact chain, and as many launch slices with the `py` arg;
the other launch slices have none.
"""
import json
import os
import sys

import numpy as np
import pytest

from timeline.pystack import records as R
from timeline.trace_processor import open_trace
from helpers import REPO, read_raw, require_root, timeline_cmd
from pystack_pythons import PYTHONS
from test_cuda_record import real_cudart, slices
from test_pystack_record import arg_text, chain, recorded_stacks

TARGET = os.path.join(REPO, "tests", "pystack_target.py")
LAUNCHES, EVERY = 100, 10


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    require_root()
    python = next(iter(PYTHONS.values()), sys.executable)
    d = tmp_path_factory.mktemp("pylaunch")
    raw, trace = str(d / "run.tlraw"), str(d / "run.pftrace")
    cp = timeline_cmd("record", "--raw-only", "-e", "cuda,pystack", "--py-sample-hz", "0",
                      "--py-launch-every", str(EVERY), "-o", raw, "--cuda-lib", real_cudart(),
                      "--", python, TARGET, "launch", real_cudart(), str(LAUNCHES),
                      env={**os.environ, "PYSTACK_TARGET_DELAY": "0.2"})
    assert cp.returncode == 0, cp.stderr
    info = json.loads(cp.stdout.strip().splitlines()[-1])
    cv = timeline_cmd("convert", raw, "-o", trace)
    assert cv.returncode == 0, cv.stderr
    tp = open_trace(trace)
    yield {"cp": cp, "raw": read_raw(raw), "info": info, "tp": tp}
    tp.close()


def test_one_launch_in_every_gets_the_stack(run):
    info = run["info"]
    recs = np.concatenate(run["raw"]["pystack"])
    calls = recs[(recs["kind"] == R.PY_CALL) & (recs["tgid"] == info["pid"])]
    names = run["raw"]["header"]["pystack"]["probes"]
    assert {names[str(c)] for c in calls["cookie"].tolist()} == {"cudaLaunchKernel"}
    assert calls.size == LAUNCHES // EVERY
    stacks = recorded_stacks(run["raw"])
    for sid in calls["stack_id"].tolist():
        assert stacks[(info["pid"], sid)] == chain(info, "INNER_LAUNCH")
    stats = [m for m in run["raw"]["metas"] if m["type"] == "py_stats"][0]
    assert stats["launches"] == LAUNCHES and stats["nested_launches"] == 0, stats


def test_launch_slices_carry_the_stack_one_in_every(run):
    info = run["info"]
    rows = slices(run["tp"], f"s.name = 'cudaLaunchKernel' and t.tid = {info['tid']}")
    assert len(rows) == LAUNCHES
    with_py = [i for i, r in enumerate(rows) if "py" in r]
    assert with_py == list(range(0, LAUNCHES, EVERY)), with_py
    assert {rows[i]["py"] for i in with_py} == {arg_text(info, "INNER_LAUNCH")}


def test_launch_every_zero_takes_none(tmp_path):
    require_root()
    python = next(iter(PYTHONS.values()), sys.executable)
    raw = str(tmp_path / "r.tlraw")
    cp = timeline_cmd("record", "--raw-only", "-e", "cuda,pystack", "--py-sample-hz", "0", "--py-launch-every", "0",
                      "-o", raw, "--cuda-lib", real_cudart(), "--", python, TARGET, "launch", real_cudart(), "20",
                      env={**os.environ, "PYSTACK_TARGET_DELAY": "0.2"})
    assert cp.returncode == 0, cp.stderr
    recs = np.concatenate(read_raw(raw).get("pystack") or [np.zeros(0, R.PY_EVENT)])
    assert not (recs["kind"] == R.PY_CALL).any()
