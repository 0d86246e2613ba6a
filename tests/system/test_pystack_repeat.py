"""A stack taken call after call from one line, then from another, then the first
again (the common case a thread's walk is cheapest for: it remembers the stack it
sent last and its thread state): every call's record names the line it was made
from, for every CPython here.

tests/pystack_target.py `repeat`: inner() calls cudaStreamSynchronize twice from
line A, twice from line B, twice from A ... (the real libcudart, no GPU).
"""
import json
import os

import numpy as np
import pytest

from timeline.pystack import records as R
from helpers import REPO, read_raw, require_root, timeline_cmd
from pystack_pythons import PYTHONS, params
from test_cuda_record import real_cudart
from test_pystack_record import chain, recorded_stacks

TARGET = os.path.join(REPO, "tests", "pystack_target.py")
SYNCS = 10


@pytest.mark.parametrize("name", params())
def test_each_call_names_its_own_line(name, tmp_path):
    require_root()
    raw = str(tmp_path / "run.tlraw")
    cp = timeline_cmd("record", "--raw-only", "-e", "cuda,pystack", "--py-sample-hz", "0", "-o", raw,
                      "--cuda-lib", real_cudart(), "--", PYTHONS[name], TARGET, "repeat", real_cudart(), str(SYNCS),
                      env={**os.environ, "PYSTACK_TARGET_DELAY": "0.2"})
    assert cp.returncode == 0, cp.stderr
    info = json.loads(cp.stdout.strip().splitlines()[-1])
    run = read_raw(raw)
    recs = np.concatenate(run["pystack"])
    calls = recs[(recs["kind"] == R.PY_CALL) & (recs["tid"] == info["tid"])]
    calls = calls[np.argsort(calls["ts"], kind="stable")]
    assert calls.size == SYNCS
    stacks = recorded_stacks(run)
    got = [stacks[(info["pid"], sid)] for sid in calls["stack_id"].tolist()]
    want = [chain(info, "INNER_SYNC_A" if i // 2 % 2 == 0 else "INNER_SYNC_B") for i in range(SYNCS)]
    assert got == want
    assert len(set(calls["stack_id"].tolist())) == 2
