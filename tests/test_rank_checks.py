"""rank_straggler and rank_imbalance on real torchrun jobs (gloo, CPU): one
rank made slower is named, a balanced job is quiet; 2 and 4 ranks."""
import os
import sys

import pytest

from helpers import require_root, timeline_cmd
from timeline.checks import run_checks
from timeline.trace_processor import open_trace

TRAIN = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
slow = int(os.environ.get("SLOW_RANK", "-1"))
a = torch.randn(128, 128)
t = torch.ones(1 << 14)
for step in range(25):
    end = time.perf_counter() + (0.03 if rank == slow else 0.01)   # the slow rank computes 3x longer
    while time.perf_counter() < end:
        a @ a
    dist.all_reduce(t)
dist.destroy_process_group()
"""

CASES = {"2-slow": (2, 1), "2-even": (2, -1), "4-slow": (4, 2), "4-even": (4, -1)}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    require_root()
    d = tmp_path_factory.mktemp("ranks")
    script = d / "train.py"
    script.write_text(TRAIN)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = {}
    for port, (name, (n, slow)) in enumerate(CASES.items(), start=29561):
        path = str(d / f"{name}.pftrace")
        cp = timeline_cmd("record", "-q", "-e", "sched", "-o", path, "--", torchrun, "--nproc-per-node", str(n),
                          "--master-port", str(port), str(script), env=dict(os.environ, SLOW_RANK=str(slow)),
                          timeout=300)
        assert cp.returncode == 0, cp.stderr[-2000:]
        out[name] = path
    return out


def results(path):
    with open_trace(path) as tp:
        rep = run_checks(tp, path, only=["rank_straggler", "rank_imbalance"])
    return {r.check.id: r for r in rep.results}


@pytest.mark.parametrize("name", ["2-slow", "4-slow"])
def test_slow_rank_is_named(traces, name):
    n, slow = CASES[name]
    res = results(traces[name])
    st = res["rank_straggler"]
    assert st.status == "warning", st.findings
    top = st.findings[0]
    assert top.evidence["rank"] == slow and top.message.startswith(f"rank {slow} "), top.message
    assert top.evidence["rounds_last"] >= 10  # most of the 25 all_reduce rounds
    assert 5 <= top.evidence["median_ms"] <= 60  # the others waited ~20 ms a round for it
    assert "running" in top.message
    im = res["rank_imbalance"]
    assert im.status == "warning" and im.findings[0].evidence["spread"] >= 0.2, im.findings
    per_rank = [f for f in im.findings if f.severity == "info"]
    assert len(per_rank) == n
    busiest = max(per_rank, key=lambda f: f.evidence["busy_fraction"])
    assert busiest.evidence["rank"] == slow


@pytest.mark.parametrize("name", ["2-even", "4-even"])
def test_balanced_job_is_quiet(traces, name):
    res = results(traces[name])
    assert res["rank_straggler"].status == "ok", res["rank_straggler"].findings
    assert res["rank_imbalance"].status == "ok", res["rank_imbalance"].findings


def test_without_ranks_not_applicable():
    from helpers import REPO
    res = results(os.path.join(REPO, "sample_traces", "train_cpu.pftrace"))
    assert res["rank_straggler"].status == "n/a" and res["rank_imbalance"].status == "n/a"
