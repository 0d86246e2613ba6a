"""A tight loop of tiny kernel launches, for bench/gpu_truth.py's launch-cost phase.

    python bench/gpu_truth_launch.py cuda|cpu [BATCHES] [PER_BATCH]
    python bench/gpu_truth_launch.py cuda|cpu stream SECONDS [PER_BATCH]

Each "step" is PER_BATCH `x.add_(1)` calls on a 16-element tensor, then one synchronize: the
GPU finishes each kernel in ~2 µs, so a step's time is what the host spends per launch (torch's
dispatch, the CUDA runtime, and whatever a recorder adds).  Prints `BENCH {"step_s": [...]}`
like train_cpu.py, so a step's median over PER_BATCH is the cost of one launch.
`stream` runs batches for SECONDS and prints each as `B <CLOCK_BOOTTIME ns at its end> <s>`,
so a recorder attached with --pid for a while can be compared with the same process before
and after (launch-ab phase): processes differ more than what is measured.
"""
import json
import sys
import time

import torch


def launches(x, n):
    for _ in range(n):
        x.add_(1)


def main() -> None:
    dev = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] == "stream":
        return stream(dev, float(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 1000)
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    per = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    x = torch.zeros(16, device=dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    launches(x, 2000)  # warm-up: lazy module loading, allocator, the recorder's first symbolization
    sync()
    steps = []
    for _ in range(batches):
        t = time.perf_counter()
        launches(x, per)
        sync()
        steps.append(time.perf_counter() - t)
    print("BENCH " + json.dumps({"step_s": steps, "launches_per_step": per}), flush=True)


def stream(dev: str, seconds: float, per: int) -> None:
    x = torch.zeros(16, device=dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    launches(x, 2000)
    sync()
    print("READY", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        launches(x, per)
        sync()
        d = time.perf_counter() - t
        print(f"B {time.clock_gettime_ns(time.CLOCK_BOOTTIME)} {d:.6f}", flush=True)


if __name__ == "__main__":
    main()
