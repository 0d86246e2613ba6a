"""Rank checks on a trace without ranks, and the helper the recorded jobs use
(tests/system/test_rank_checks.py).
"""
import os

from timeline.checks import run_checks
from timeline.trace_processor import open_trace


def results(path):
    with open_trace(path) as tp:
        rep = run_checks(tp, path, only=["rank_straggler", "rank_imbalance"])
    return {r.check.id: r for r in rep.results}


def test_without_ranks_not_applicable():
    from helpers import REPO
    res = results(os.path.join(REPO, "sample_traces", "train_cpu.pftrace"))
    assert res["rank_straggler"].status == "n/a" and res["rank_imbalance"].status == "n/a"
