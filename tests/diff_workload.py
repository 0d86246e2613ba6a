"""A small training-like loop for `timeline diff` tests: per step it takes a
batch from a DataLoader (2 worker processes), computes a little, sleeps a
little, and makes one blocking cudaMemcpy through NVIDIA's real CUDA runtime
(no driver here: it fails at once, but the call is the step's periodic sync
the diff cuts steps at).  Each option changes one thing:

    --extra-sleep-ms N   the main thread sleeps N ms more per step
    --slow-loader-ms N   each batch takes a worker N ms more to make
    --contention         a process of higher priority takes its CPU most of
                         the time (busy 4-8 ms, then 1 ms off)

Two runs of one configuration must agree on a loaded shared machine: the
loop is mostly sleeping, and it runs real-time (SCHED_FIFO, when allowed,
inherited by the workers) on one CPU, so that other work on the machine
neither delays its wakeups nor takes its CPU; only the hog, at a higher
real-time priority, can.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import os
import site
import time

import warnings

import torch
from torch.utils.data import DataLoader, Dataset

BATCH = 4


class Samples(Dataset):
    def __init__(self, n: int, slow_s: float):
        self.n, self.slow_s = n, slow_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.slow_s:
            time.sleep(self.slow_s / BATCH)
        return torch.full((64,), float(i))


def cuda_memcpy():
    """cudaMemcpy from the real runtime, or None when the wheel is missing."""
    libs = [p for d in site.getsitepackages()
            for p in glob.glob(os.path.join(d, "nvidia", "cuda_runtime", "lib", "libcudart.so.*"))]
    if not libs:
        return None
    fn = ctypes.CDLL(libs[0]).cudaMemcpy
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return fn


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def hog(parent: int) -> None:
    """Busy 4-8 ms (varied, so that the main thread's sleeps cannot fall into
    step with it), then 1 ms off, until its parent is gone (at most a minute):
    never all of the CPU, so the main thread still gets its turns."""
    os.sched_setaffinity(0, {0})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(2))
    end, i = time.monotonic() + 60, 0
    while os.getppid() == parent and time.monotonic() < end:
        spin(0.004 + 0.001 * (i * 7 % 5))
        time.sleep(0.001)
        i += 1
    os._exit(0)


def realtime() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return True
    except (PermissionError, OSError):
        return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--extra-sleep-ms", type=float, default=0)
    ap.add_argument("--slow-loader-ms", type=float, default=0)
    ap.add_argument("--contention", action="store_true")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message=".*worker processes in total")  # pinned to one CPU on purpose
    os.sched_setaffinity(0, {0})  # the workers inherit it; the hogs then compete for this CPU
    rt = realtime()
    memcpy = cuda_memcpy()
    src = torch.zeros(1024)
    loader = DataLoader(Samples((args.steps + 2) * BATCH, args.slow_loader_ms / 1e3), batch_size=BATCH,
                        num_workers=2, prefetch_factor=2)
    hogs = []
    for _ in range(1 if args.contention else 0):
        pid = os.fork()
        if pid == 0:
            hog(os.getppid())
        hogs.append(pid)
    try:
        for step, x in enumerate(loader):
            spin(0.002)
            time.sleep(0.020 + args.extra_sleep_ms / 1e3)
            if memcpy is not None:
                memcpy(0x7F0000000000, src.data_ptr(), src.numel() * 4, 2)
            if step + 1 >= args.steps:
                break
    finally:
        for pid in hogs:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    print(f"done (real-time: {rt})", flush=True)


if __name__ == "__main__":
    main()
