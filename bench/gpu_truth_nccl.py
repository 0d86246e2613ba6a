"""NCCL collectives from a known Python call chain, for bench/gpu_truth.py's nccl phase.

    python bench/gpu_truth_nccl.py nccl|gloo [CALLS]

One process, world size 1, on the one lent GPU (`gloo` on the CPU for the dry run): CALLS
all_reduce calls made as outer() -> middle() -> inner(), so each `ncclAllReduce` slice's `py`
stack must name inner()'s all_reduce line.  Prints `WINDOW boottime_ns A B` around them and
`NCCL_LINE file:line` (the line the stacks must name).
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def inner(t):
    dist.all_reduce(t)  # NCCL_LINE


def middle(t):
    inner(t)


def outer(t, calls):
    for _ in range(calls):
        middle(t)


def main() -> None:
    backend = sys.argv[1]
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    gpu = backend == "nccl"
    if gpu:
        torch.cuda.set_device(0)
    dist.init_process_group(backend, rank=0, world_size=1)
    t = torch.ones(1 << 20, device="cuda" if gpu else "cpu")
    inner(t)  # communicator set-up outside the window
    if gpu:
        torch.cuda.synchronize()
    t_a = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    outer(t, calls)
    if gpu:
        torch.cuda.synchronize()
    t_b = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    line = next(i for i, s in enumerate(open(__file__), 1) if s.rstrip().endswith("# NCCL_LINE"))
    print(f"WINDOW boottime_ns {t_a} {t_b}", flush=True)
    print(f"NCCL_LINE {os.path.basename(__file__)}:{line} sum {float(t[0])}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
