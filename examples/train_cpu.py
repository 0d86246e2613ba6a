"""A small CPU training run: a CNN fed by a DataLoader that reads files from disk.

It is the bundled example for `timeline record`: the main thread trains, two
DataLoader worker processes (`pt_data_worker`) load samples from .npy files,
so the trace shows processes, threads, their scheduling and their waits.

    python examples/train_cpu.py [--steps 60] [--workers 2] [--data DIR]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class NpyFiles(Dataset):
    """One sample per .npy file, read on every access (no caching)."""

    def __init__(self, root: str, n: int, shape=(3, 32, 32)):
        self.paths = [os.path.join(root, f"sample_{i:05d}.npy") for i in range(n)]
        rng = np.random.default_rng(0)
        for i, p in enumerate(self.paths):
            if not os.path.exists(p):
                np.save(p, rng.standard_normal(shape, dtype=np.float32))
        self.labels = rng.integers(0, 10, size=n)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        x = torch.from_numpy(np.load(self.paths[i]))
        return x, int(self.labels[i])


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "timeline-example-data"))
    args = ap.parse_args()

    os.makedirs(args.data, exist_ok=True)
    ds = NpyFiles(args.data, n=args.steps * args.batch // 2 or 1)
    loader = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.workers > 0)
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    step, t0 = 0, time.perf_counter()
    while step < args.steps:
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            step += 1
            if step % 20 == 0:
                print(f"step {step} loss {loss.item():.3f}", flush=True)
            if step >= args.steps:
                break
    dt = time.perf_counter() - t0
    print(f"trained {step} steps in {dt:.2f}s ({dt / step * 1e3:.1f} ms/step)")


if __name__ == "__main__":
    main()
