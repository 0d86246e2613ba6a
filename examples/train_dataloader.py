"""A data-bound CPU training run: DataLoader workers read every sample from disk.

The bundled example for the kernel-context families (block I/O, DataLoader
roles, counters): sample files are written once, then dropped from the page
cache (posix_fadvise DONTNEED, this file's pages only; nothing global like
drop_caches), so the workers' reads become real block requests and the main
thread waits for batches.

With a GPU, batches and the model go to it (`cuda`).  Without one, the main
thread still makes, per step, the calls that copy a batch and launch a kernel
through NVIDIA's real CUDA runtime (the nvidia-cuda-runtime-cu12 wheel): with
no driver they fail at once with error 35, but they show where CUDA calls sit
next to the workers' reads and the main thread's waits.

    python examples/train_dataloader.py [--steps 20] [--workers 2] [--data DIR] [--keep-cache]
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import os
import site
import tempfile
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

SHAPE = (3, 64, 64)  # 48 KiB of float32 per sample


def write_samples(root: str, n: int) -> list[str]:
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = [os.path.join(root, f"sample_{i:05d}.npy") for i in range(n)]
    for p in paths:
        if not os.path.exists(p):
            np.save(p, rng.standard_normal(SHAPE, dtype=np.float32))
    return paths


def evict(paths: list[str]) -> None:
    """Drop these files' pages from the page cache (they must be clean: fsync first)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class NpyFiles(Dataset):
    def __init__(self, paths: list[str]):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return torch.from_numpy(np.load(self.paths[i])), i % 10


class FakeGpuCalls:
    """Per step: cudaMemcpy (H2D, the batch's bytes) + cudaLaunchKernel, no GPU needed."""

    class Dim3(ctypes.Structure):
        _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]

    def __init__(self):
        libs = [p for d in site.getsitepackages()
                for p in glob.glob(os.path.join(d, "nvidia", "cuda_runtime", "lib", "libcudart.so.*"))]
        self.rt = ctypes.CDLL(libs[0]) if libs else None
        if self.rt is not None:
            self.rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            self.rt.cudaLaunchKernel.argtypes = [ctypes.c_void_p, self.Dim3, self.Dim3, ctypes.c_void_p,
                                                 ctypes.c_size_t, ctypes.c_void_p]

    def step(self, x: torch.Tensor) -> None:
        if self.rt is None:
            return
        self.rt.cudaMemcpy(0x7F0000000000, x.data_ptr(), x.numel() * x.element_size(), 1)  # H2D
        self.rt.cudaLaunchKernel(0x1000, self.Dim3(x.shape[0], 1, 1), self.Dim3(256, 1, 1), None, 0, None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "timeline-dataloader-data"))
    ap.add_argument("--keep-cache", action="store_true", help="do not evict the samples from the page cache")
    args = ap.parse_args()

    paths = write_samples(args.data, args.steps * args.batch)
    if not args.keep_cache:
        evict(paths)
    loader = DataLoader(NpyFiles(paths), batch_size=args.batch, shuffle=True, num_workers=args.workers)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                        nn.Linear(8 * 16, 10))
    gpu = torch.cuda.is_available()
    fake = None if gpu else FakeGpuCalls()
    if gpu:
        net = net.cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    t0, step = time.perf_counter(), 0
    for x, y in loader:
        if gpu:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        else:
            fake.step(x)
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        step += 1
        if step >= args.steps:
            break
    dt = time.perf_counter() - t0
    print(f"trained {step} steps in {dt:.2f}s ({dt / max(step, 1) * 1e3:.1f} ms/step)", flush=True)


if __name__ == "__main__":
    main()
