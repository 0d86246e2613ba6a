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


def model(kind: str = "cnn") -> nn.Module:
    if kind == "mlp":  # many small ops: dispatch-bound, shows per-op overhead
        return nn.Sequential(nn.Flatten(), *[m for _ in range(8) for m in (nn.LazyLinear(64), nn.ReLU())],
                             nn.LazyLinear(10))
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
    ap.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    ap.add_argument("--warmup", type=int, default=0, help="steps left out of the timing")
    ap.add_argument("--profiler", choices=["none", "torch"], default="none",
                    help="wrap the loop in torch.profiler (CPU activities), for overhead comparisons")
    ap.add_argument("--json", action="store_true", help="print per-step times as one JSON line")
    args = ap.parse_args()

    os.makedirs(args.data, exist_ok=True)
    ds = NpyFiles(args.data, n=args.steps * args.batch // 2 or 1)
    loader = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.workers > 0)
    net = model(args.model)
    net(torch.zeros(1, 3, 32, 32))  # materialise lazy layers before the optimizer sees them
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    prof = None
    if args.profiler == "torch":
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        prof.__enter__()
    total = args.steps + args.warmup
    step, t0, times = 0, time.perf_counter(), []
    last = t0
    while step < total:
        for x, y in loader:  # step time includes waiting for the batch
            opt.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            step += 1
            now = time.perf_counter()
            if step > args.warmup:
                times.append(now - last)
            last = now
            if step % 20 == 0 and not args.json:
                print(f"step {step} loss {loss.item():.3f}", flush=True)
            if step >= total:
                break
    if prof is not None:
        prof.__exit__(None, None, None)
    dt = sum(times)
    if args.json:
        import json

        print("BENCH " + json.dumps({"step_s": times, "wall_s": time.perf_counter() - t0}), flush=True)
    else:
        print(f"trained {len(times)} steps in {dt:.2f}s ({dt / len(times) * 1e3:.1f} ms/step)")


if __name__ == "__main__":
    main()
