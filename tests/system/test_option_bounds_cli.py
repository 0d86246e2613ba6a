"""Numeric `record` options with bounds through the real command (issue 20): one line and
exit 2 past a bound, 0 still means off. Preflight in-process: tests/unit/test_option_bounds.py.
"""
from __future__ import annotations

import os

import pytest

from helpers import REPO, read_raw, require_root, timeline_cmd


@pytest.mark.parametrize("value", ["nan", "1e-300", "0.001", "-1", "inf", "-inf", "abc", ""])
def test_sample_interval_out_of_bounds_is_one_line(tmp_path, value):
    cp = timeline_cmd("record", "-o", str(tmp_path / "t.pftrace"), "-e", "sched,counters",
                      "--sample-interval", value, "--", "/bin/true", cwd=REPO)
    assert cp.returncode == 2, (cp.returncode, cp.stderr)
    assert cp.stderr.startswith("timeline: error: ") and cp.stderr.count("\n") == 1, cp.stderr
    assert "--sample-interval" in cp.stderr and "Traceback" not in cp.stderr, cp.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("value, sampled", [("0", False), ("0.01", True)])
def test_sample_interval_zero_still_means_off(tmp_path, value, sampled):
    require_root()
    raw = tmp_path / "t.tlraw"
    cp = timeline_cmd("record", "-q", "--raw-only", "-o", str(raw), "-e", "sched,counters",
                      "--sample-interval", value, "--", "/bin/true", cwd=REPO)
    assert cp.returncode == 0, cp.stderr
    samples = [m for m in read_raw(str(raw))["metas"] if m.get("type") == "kctx_samples"]
    assert bool(samples) == sampled, samples[:2]
