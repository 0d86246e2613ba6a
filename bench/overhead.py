"""Step-time slowdown of a CPU training loop under timeline and its peers (issue 6, workload 2).

    sudo python bench/overhead.py [--reps 5] [--steps 150] [--model cnn|mlp|both]
                                  [--configs default,sched,torch-profiler,viztracer]
                                  [--device cpu|cuda]

The workload is examples/train_cpu.py: a model fed by DataLoader(num_workers=2)
reading .npy files from disk; its own per-step times (batch wait included)
are the measurement.  Configurations run in a rotating order, `reps` times
each, always next to untraced runs in the same invocation, so a ratio is
measured under the same machine conditions.  Reported: median step time,
slowdown vs untraced (ratio of medians), the script's wall time, and the
end-to-end time of the whole command (for timeline: recording plus writing
the trace; for viztracer: saving its JSON).

Configurations: `untraced` (always), `default` (timeline with its default
event families), `entry-only` (default families, --cuda-mode entry-only),
any single family name (`sched`, `proc`, ...: timeline with
only that family), `torch-profiler` (torch.profiler, CPU activities, plus
CUDA ones with --device cuda, in the script: a code change), `viztracer` (python -m viztracer).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORKLOAD = os.path.join(REPO, "examples", "train_cpu.py")
# glibc malloc otherwise makes torch loops vary by ±13% run to run (shared/NOTES.md).
ENV = dict(os.environ, MALLOC_MMAP_THRESHOLD_="33554432", MALLOC_TRIM_THRESHOLD_="1073741824",
           PYTHONUNBUFFERED="1")


def command(config: str, model: str, steps: int, warmup: int, data: str, out_dir: str,
            device: str = "cpu") -> list[str]:
    script = [WORKLOAD, "--model", model, "--steps", str(steps), "--warmup", str(warmup), "--json", "--data", data,
              "--device", device]
    py = sys.executable
    if config == "untraced":
        return [py, *script]
    if config == "torch-profiler":
        return [py, *script, "--profiler", "torch"]
    if config == "viztracer":
        return [py, "-m", "viztracer", "--quiet", "-o", os.path.join(out_dir, "viz.json"), *script]
    rec = [py, "-m", "timeline.cli", "record", "-q", "-o", os.path.join(out_dir, "t.pftrace")]
    if config == "entry-only":
        rec += ["--cuda-mode", "entry-only"]
    elif config != "default":
        rec += ["--events", config]
    return [*rec, "--", py, *script]


def run_once(cmd: list[str]) -> tuple[float, float, float]:
    """(median step s, script wall s, end-to-end s) of one run."""
    t = time.perf_counter()
    cp = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=900)
    total = time.perf_counter() - t
    line = next((ln for ln in cp.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if cp.returncode != 0 or line is None:
        raise SystemExit(f"run failed ({cp.returncode}): {' '.join(cmd)}\n{cp.stderr[-2000:]}")
    data = json.loads(line[6:])
    return statistics.median(data["step_s"]), data["wall_s"], total


def available(config: str) -> bool:
    if config == "viztracer":
        return subprocess.run([sys.executable, "-c", "import viztracer"], capture_output=True).returncode == 0
    return True


def bench_model(model: str, configs: list[str], reps: int, steps: int, warmup: int,
                device: str = "cpu") -> list[dict]:
    data = os.path.join(tempfile.gettempdir(), "timeline-bench-data")
    with tempfile.TemporaryDirectory(prefix="tl-overhead-") as out:
        order = ["untraced", *configs]
        subprocess.run(command("untraced", model, 5, 0, data, out, device), env=ENV, capture_output=True)  # make data
        samples: dict[str, list[tuple[float, float, float]]] = {c: [] for c in order}
        for rep in range(reps):
            k = rep % len(order)
            for cfg in order[k:] + order[:k]:  # rotate so no config always runs first
                samples[cfg].append(run_once(command(cfg, model, steps, warmup, data, out, device)))
                print(f"  {model} rep {rep + 1}/{reps} {cfg:15s} step {samples[cfg][-1][0] * 1e3:7.2f} ms",
                      file=sys.stderr, flush=True)
    base = statistics.median(s[0] for s in samples["untraced"])
    rows = []
    for cfg in order:
        step = statistics.median(s[0] for s in samples[cfg])
        rows.append({"model": model, "device": device, "config": cfg, "step_ms": step * 1e3,
                     "slowdown_pct": (step / base - 1) * 100,
                     "wall_s": statistics.median(s[1] for s in samples[cfg]),
                     "end_to_end_s": statistics.median(s[2] for s in samples[cfg]),
                     "spread_pct": (max(s[0] for s in samples[cfg]) - min(s[0] for s in samples[cfg])) / step * 100})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--model", choices=["cnn", "mlp", "both"], default="both")
    ap.add_argument("--configs", default="default,torch-profiler,viztracer")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda to train on a GPU")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    configs = [c for c in args.configs.split(",") if c and available(c)]
    if any(c not in ("torch-profiler", "viztracer") for c in configs) and os.geteuid() != 0:
        raise SystemExit("timeline configurations need root: run with sudo")
    rows = []
    for model in (["cnn", "mlp"] if args.model == "both" else [args.model]):
        rows += bench_model(model, configs, args.reps, args.steps, args.warmup, args.device)
    print(f"\n{'model':5s} {'config':15s} {'step ms':>8s} {'slowdown':>9s} {'spread':>7s} {'wall s':>7s} {'end-to-end s':>13s}")
    for r in rows:
        print(f"{r['model']:5s} {r['config']:15s} {r['step_ms']:8.2f} {r['slowdown_pct']:+8.1f}% "
              f"{r['spread_pct']:6.1f}% {r['wall_s']:7.2f} {r['end_to_end_s']:13.2f}")
    print(f"\n{args.reps} runs per configuration, rotating order; slowdown = ratio of median step times "
          "to the untraced runs of the same invocation; spread = (max-min)/median step time.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
