"""A small training run: a CNN fed by a DataLoader that reads files from disk.

It is the bundled example for `timeline record`: the main thread trains, two
DataLoader worker processes (`pt_data_worker`) load samples from .npy files,
so the trace shows processes, threads, their scheduling and their waits.
It trains on the CPU by default; `--device cuda` trains on a GPU (pinned
batches copied with non_blocking=True, the loss read back every 20 steps),
which is what docs/gpu-validation.md records.

    python examples/train_cpu.py [--steps 60] [--workers 2] [--data DIR] [--device cuda]
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
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--profiler", choices=["none", "torch"], default="none",
                    help="wrap the loop in torch.profiler (CPU activities, plus CUDA on a GPU), "
                         "for overhead comparisons")
    ap.add_argument("--profile-out", help="with --profiler torch: export its trace (Chrome JSON) here; "
                    "the timed steps are inside a 'timeline_window' annotation")
    ap.add_argument("--json", action="store_true", help="print per-step times as one JSON line")
    args = ap.parse_args()

    os.makedirs(args.data, exist_ok=True)
    ds = NpyFiles(args.data, n=args.steps * args.batch // 2 or 1)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run with --device cpu, or examples/train_dataloader.py")
    gpu = dev.type == "cuda"
    loader = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.workers > 0, pin_memory=gpu)
    net = model(args.model)
    net(torch.zeros(1, 3, 32, 32))  # materialise lazy layers before the optimizer sees them
    net.to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    prof = window = None
    if args.profiler == "torch":
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
        prof = torch.profiler.profile(activities=acts)
        prof.__enter__()
    total = args.steps + args.warmup
    step, t0, times = 0, time.perf_counter(), []
    last = t0
    while step < total:
        for x, y in loader:  # step time includes waiting for the batch
            if step == args.warmup:
                if gpu:
                    torch.cuda.synchronize()
                # CLOCK_BOOTTIME is the trace clock of timeline, so the window is comparable
                t_a = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
                if prof is not None:
                    window = torch.profiler.record_function("timeline_window")
                    window.__enter__()
            if gpu:  # an NVTX range per step: what the gpu family shows on the main thread
                torch.cuda.nvtx.range_push(f"step {step}")
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            opt.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            if gpu:
                torch.cuda.nvtx.range_pop()
            step += 1
            if gpu and step % 20 == 0:
                loss.item()  # what training loops do for logging: a D2H copy and a sync
            now = time.perf_counter()
            if step > args.warmup:
                times.append(now - last)
            last = now
            if step % 20 == 0 and not args.json:
                print(f"step {step} loss {loss.item():.3f}", flush=True)
            if step >= total:
                break
    if gpu:
        torch.cuda.synchronize()
    t_b = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    if window is not None:
        window.__exit__(None, None, None)
    if prof is not None:
        prof.__exit__(None, None, None)
        if args.profile_out:
            prof.export_chrome_trace(args.profile_out)
    print(f"WINDOW boottime_ns {t_a} {t_b}", flush=True)
    dt = sum(times)
    if args.json:
        import json

        print("BENCH " + json.dumps({"step_s": times, "wall_s": time.perf_counter() - t0}), flush=True)
    else:
        print(f"trained {len(times)} steps in {dt:.2f}s ({dt / len(times) * 1e3:.1f} ms/step)")


if __name__ == "__main__":
    main()
