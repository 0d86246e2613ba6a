"""STAND-INS: every NCCL collective's slice carries the Python line that called it.

The target calls the stand-in libnccl's ncclAllReduce (tests/standins/nccl.c)
through outer() -> middle() -> inner(), as torch.distributed's all_reduce
does on a real GPU (seen on an H100, docs/gpu-validation.md: 41 of 41
`ncclAllReduce` slices with their stack); recorded with the cuda and
pystack families, each ncclAllReduce slice's `py` arg is that chain, with
exact lines.
"""
import json
import os
import sys

from helpers import REPO, require_root, timeline_cmd
from standins import build
from test_cuda_record import slices
from timeline.trace_processor import open_trace

CALLS = 5
TARGET = '''\
import ctypes, json, os, sys, threading, time
from ctypes import byref, c_int, c_size_t, c_void_p as P
sys.path.insert(0, os.environ["STANDINS"])
from cuda_workload import UniqueId

nccl = ctypes.CDLL(sys.argv[1])
nccl.ncclCommInitRank.argtypes = [P, c_int, UniqueId, c_int]
nccl.ncclAllReduce.argtypes = [P, P, c_size_t, c_int, c_int, P, P]


def inner(comm):
    nccl.ncclAllReduce(0x1111, 0x2222, 1000, 7, 0, comm, 0x55)  # INNER


def middle(comm):
    inner(comm)  # MIDDLE


def outer(comm, n):
    for _ in range(n):
        middle(comm)  # OUTER


time.sleep(0.2)  # a real job imports for a while first: the recorder finds its interpreter
comm = P()
nccl.ncclCommInitRank(byref(comm), 2, UniqueId(b"\\x07"), 0)
outer(comm, int(sys.argv[2]))  # MODULE
print(json.dumps({"pid": os.getpid(), "tid": threading.get_native_id()}), flush=True)
time.sleep(0.3)  # the recorder names the code objects while the process lives
'''


def test_nccl_collectives_carry_their_python_line(tmp_path):
    require_root()
    libs = build(str(tmp_path / "libs"))
    target = tmp_path / "nccl_target.py"
    target.write_text(TARGET)
    lines = {tag: i for i, text in enumerate(TARGET.splitlines(), 1) for tag in ("INNER", "MIDDLE", "OUTER", "MODULE")
             if text.rstrip().endswith(f"# {tag}")}
    raw, trace = str(tmp_path / "n.tlraw"), str(tmp_path / "n.pftrace")
    env = dict(os.environ, STANDINS=os.path.join(REPO, "tests", "standins"))
    cp = timeline_cmd("record", "--raw-only", "-e", "cuda,pystack", "--py-sample-hz", "0",
                      "--cuda-lib", libs["libnccl.so.2"], "-o", raw, "--",
                      sys.executable, str(target), libs["libnccl.so.2"], str(CALLS), env=env)
    assert cp.returncode == 0, cp.stderr
    info = json.loads(cp.stdout.splitlines()[-1])
    cv = timeline_cmd("convert", raw, "-o", trace)
    assert cv.returncode == 0, cv.stderr
    want = " \u2190 ".join(f"nccl_target.py:{lines[tag]} {fn}" for tag, fn in (
        ("INNER", "inner"), ("MIDDLE", "middle"), ("OUTER", "outer"), ("MODULE", "<module>")))
    with open_trace(trace) as tp:
        calls = slices(tp, f"s.category = 'nccl' and t.tid = {info['tid']}")
    reduces = [c for c in calls if c["name"] == "ncclAllReduce"]
    assert len(reduces) == CALLS, [c["name"] for c in calls]
    assert all(c.get("py") == want for c in reduces), (want, [c.get("py") for c in reduces])
