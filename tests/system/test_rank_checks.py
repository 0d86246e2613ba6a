"""rank_straggler and rank_imbalance on real torchrun jobs (gloo, CPU): one
rank made slower is named, a balanced job is quiet; 2 and 4 ranks."""
import os
import sys

import pytest

from helpers import require_root, timeline_cmd

from test_rank_checks_units import results

TRAIN = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
slow = int(os.environ.get("SLOW_RANK", "-1"))
torch.set_num_threads(1)   # the compute is this thread's alone
a = torch.randn(128, 128)
t = torch.ones(1 << 14)
for step in range(25):
    # CPU time, not wall time: a rank preempted on this 2-core machine (the other rank, the
    # recorder) still computes its full share, so a balanced job's ranks run equally long
    end = time.thread_time() + (0.06 if rank == slow else 0.01)   # the slow rank computes 6x longer
    while time.thread_time() < end:
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
        cp = timeline_cmd("record", "-e", "sched", "-o", path, "--", torchrun, "--nproc-per-node", str(n),
                          "--master-port", str(port), str(script), env=dict(os.environ, SLOW_RANK=str(slow)),
                          timeout=300)
        assert cp.returncode == 0, cp.stderr[-2000:]
        out[name] = path
        out[name + ":stderr"] = cp.stderr
    return out


def test_summary_has_a_line_per_rank(traces):
    """CPU time and CUDA calls per rank, in the recorder's summary."""
    import re
    lines = {int(m.group(1)): float(m.group(2)) for m in
             re.finditer(r"timeline: rank (\d+)/4 \(pid \d+\): CPU ([0-9.]+) s, 0 CUDA/NCCL calls",
                         traces["4-slow:stderr"])}
    assert sorted(lines) == [0, 1, 2, 3], traces["4-slow:stderr"][-3000:]
    assert lines[2] == max(lines.values())  # the slowed rank computed the most


@pytest.mark.parametrize("name", ["2-slow", "4-slow"])
def test_slow_rank_is_named(traces, name):
    n, slow = CASES[name]
    res = results(traces[name])
    st = res["rank_straggler"]
    assert st.status == "warning", st.findings
    top = st.findings[0]
    assert top.evidence["rank"] == slow and top.message.startswith(f"rank {slow} "), top.message
    assert top.evidence["rounds_last"] >= 10  # most of the 25 all_reduce rounds
    # the others waited ~50 ms of its CPU time a round for it (more in wall time: 4 ranks share 2 cores)
    assert 5 <= top.evidence["median_ms"] <= 200
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


NCCL_RANK = """
import os, sys, time, ctypes
sys.path.insert(0, sys.argv[1])
from cuda_workload import UniqueId, load
libdir, bdir, delayed, rounds = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
nccl = load(os.path.join(libdir, "libnccl.so.2"))
comm = ctypes.c_void_p()
assert nccl.ncclCommInitRank(ctypes.byref(comm), world, UniqueId(b"\\x07"), rank) == 0
def arrived(k):  # a barrier through files: the stand-in's collectives do not wait for each other
    tmp = os.path.join(bdir, f".{rank}")
    with open(tmp, "w") as f:
        f.write(str(k))
    os.rename(tmp, os.path.join(bdir, str(rank)))
    while True:
        try:
            done = [int(open(os.path.join(bdir, str(r))).read() or -1) for r in range(world)]
        except (FileNotFoundError, ValueError):
            done = [-1]
        if min(done) >= k:
            return
        time.sleep(0.0005)
for k in range(rounds):
    time.sleep(0.03 if rank == delayed else 0.01)   # a step's compute: 20 ms longer on the delayed rank
    nccl.ncclAllReduce(0x1000, 0x2000, 1024, 7, 0, comm, None)
    arrived(k)
"""

NCCL_JOB = """
import os, subprocess, sys
world = int(sys.argv[1])
procs = [subprocess.Popen([sys.executable, "-c", sys.argv[2], *sys.argv[3:]],
                          env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r)))
         for r in range(world)]
sys.exit(max(p.wait() for p in procs))
"""


@pytest.mark.parametrize("world,delayed", [(3, 1), (3, -1)])
def test_nccl_rounds_name_the_late_rank(tmp_path, world, delayed):
    """Stand-in NCCL (tests/standins/nccl.c) driven by 3 processes: with NCCL
    calls recorded, rounds are the collectives themselves."""
    from helpers import REPO
    from standins import build
    require_root()
    libs = build(str(tmp_path / "libs"))
    bdir = tmp_path / "barrier"
    bdir.mkdir()
    out = str(tmp_path / "nccl.pftrace")
    cp = timeline_cmd("record", "-q", "-e", "sched,cuda", "--cuda-lib", libs["libnccl.so.2"], "-o", out, "--",
                      sys.executable, "-c", NCCL_JOB, str(world), NCCL_RANK, os.path.join(REPO, "tests", "standins"),
                      os.path.dirname(libs["libnccl.so.2"]), str(bdir), str(delayed), "15", timeout=300)
    assert cp.returncode == 0, cp.stderr[-2000:]
    st = results(out)["rank_straggler"]
    if delayed < 0:
        assert st.status == "ok", st.findings
        return
    assert st.status == "warning", st.findings
    top = st.findings[0]
    assert top.message.startswith(f"rank {delayed} ") and "NCCL rounds" in top.message, top.message
    assert top.evidence["rounds_last"] >= 12 and 10 <= top.evidence["median_ms"] <= 40, top.evidence


LOADER = """
import os, time, torch, torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
dist.init_process_group("gloo")
rank = dist.get_rank()
class DS(Dataset):
    def __len__(self): return 25
    def __getitem__(self, i):
        end = time.perf_counter() + (0.03 if rank == 1 else 0.005)   # rank 1's input pipeline is slow
        while time.perf_counter() < end:
            pass
        return torch.ones(4)
t = torch.ones(1 << 14)
for batch in DataLoader(DS(), batch_size=1, num_workers=1):
    dist.all_reduce(t)
dist.destroy_process_group()
"""


def test_straggler_waiting_for_its_dataloader(tmp_path):
    """What the straggler did meanwhile: here, waiting for its own DataLoader worker."""
    import re
    require_root()
    script = tmp_path / "loader.py"
    script.write_text(LOADER)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = str(tmp_path / "loader.pftrace")
    cp = timeline_cmd("record", "-q", "-e", "sched", "-o", out, "--", torchrun, "--nproc-per-node", "2",
                      "--master-port", "29571", str(script), timeout=300)
    assert cp.returncode == 0, cp.stderr[-2000:]
    st = results(out)["rank_straggler"]
    assert st.status == "warning" and st.findings[0].evidence["rank"] == 1, st.findings
    loader = float(re.search(r"waiting for its DataLoader (\d+)%", st.findings[0].message).group(1))
    assert loader >= 20, st.findings[0].message
