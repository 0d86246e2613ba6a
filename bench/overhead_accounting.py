"""What timeline costs a training run, accounted in CPU time (issue 6, workload 2).

    sudo python bench/overhead_accounting.py [--model cnn|mlp] [--steps 300] [--events default|LIST]

Step-time ratios on this 2-core VM drift by ±15% between identical runs
(bench/overhead.py reports them with their spread), far more than the
effect we want to bound.  This script measures the cost directly instead,
for one recorded run of examples/train_cpu.py:

- probes: kernel time spent in timeline's BPF programs, from the kernel's own
  per-program counters (`kernel.bpf_stats_enabled=1`, read with bpftool);
- recorder: CPU time of the timeline process itself (ring drains, samplers,
  CUDA maps watching), which competes with the workload for the 2 cores;
- workload: CPU time of the recorded process tree (main process + DataLoader
  workers).

overhead = (probes + recorder) / workload.  Uprobe trap entry (~0.8 µs per
CUDA call, see bench/cuda_probe_cost.py) is not in the BPF counters; this
CPU workload makes no CUDA calls.  Conversion after the run is reported
separately (it runs after training has finished).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(os.path.dirname(HERE), "examples", "train_cpu.py")
STATS = "/proc/sys/kernel/bpf_stats_enabled"


def bpf_prog_stats() -> dict[int, tuple[str, int, int]]:
    """id -> (name, run_time_ns, run_cnt) of every loaded program named tl_*."""
    out = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True).stdout
    progs = json.loads(out or "[]")
    return {p["id"]: (p.get("name", ""), p.get("run_time_ns", 0), p.get("run_cnt", 0))
            for p in progs if p.get("name", "").startswith("tl_")}


def cpu_of(procs) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--events", default="default")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: run with sudo")
    old = open(STATS).read().strip()
    with open(STATS, "w") as f:
        f.write("1")
    try:
        with tempfile.TemporaryDirectory(prefix="tl-acct-") as d:
            out = os.path.join(d, "t.pftrace")
            rec = [sys.executable, "-m", "timeline.cli", "record", "-q", "--keep-raw", "-o", out]
            if args.events != "default":
                rec += ["--events", args.events]
            cmd = [*rec, "--", sys.executable, WORKLOAD, "--model", args.model, "--steps", str(args.steps),
                   "--warmup", "10", "--json"]
            env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="33554432", MALLOC_TRIM_THRESHOLD_="1073741824")
            recorder = psutil.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            progs: dict[int, tuple[str, int, int]] = {}
            tree_cpu: dict[int, float] = {}
            rec_cpu = 0.0
            rec_attached = rec_detached = None  # recorder CPU when probes appear / were last seen
            t_conv = None
            while recorder.poll() is None:
                try:
                    rec_cpu = cpu_of([recorder])
                    for p in recorder.children(recursive=True):
                        tree_cpu[p.pid] = max(tree_cpu.get(p.pid, 0.0), cpu_of([p]))
                except psutil.Error:
                    pass
                live = bpf_prog_stats()
                if live:
                    progs.update(live)
                    if rec_attached is None:
                        rec_attached = rec_cpu
                    rec_detached = rec_cpu
                elif progs and t_conv is None:
                    t_conv = time.perf_counter()  # programs gone: recording over, converting
                time.sleep(0.2)
            conv_s = time.perf_counter() - t_conv if t_conv else 0.0
            stdout = recorder.stdout.read()
            raw = out[: -len(".pftrace")] + ".tlraw"
            raw_size = os.path.getsize(raw) if os.path.exists(raw) else 0
    finally:
        with open(STATS, "w") as f:
            f.write(old)
    line = next((ln for ln in stdout.splitlines() if ln.startswith("BENCH ")), None)
    steps = json.loads(line[6:])["step_s"] if line else []
    probe_ns = sum(v[1] for v in progs.values())
    runs = sum(v[2] for v in progs.values())
    work = sum(tree_cpu.values())
    print(f"workload {args.model}, {len(steps)} timed steps, events={args.events}")
    print(f"{'program':18s} {'runs':>10s} {'ns/run':>8s} {'total ms':>9s}")
    for name, rt, cnt in sorted(progs.values(), key=lambda v: -v[1]):
        if cnt:
            print(f"{name:18s} {cnt:10,d} {rt / cnt:8.0f} {rt / 1e6:9.1f}")
    print(f"\nworkload CPU (main + workers)  {work:8.2f} s")
    print(f"probes (BPF programs)          {probe_ns / 1e9:8.3f} s  {probe_ns / 1e9 / work * 100:6.2f} %  "
          f"({runs:,} runs)")
    during = (rec_detached or 0.0) - (rec_attached or 0.0)
    print(f"recorder while recording       {during:8.3f} s  {during / work * 100:6.2f} %  "
          "(ring drains, samplers, maps watching)")
    print(f"  added CPU while training     {(probe_ns / 1e9 + during):8.3f} s  "
          f"{(probe_ns / 1e9 + during) / work * 100:6.2f} %")
    print(f"recorder in all                {rec_cpu:8.3f} s  (start-up, load/attach, discovery, conversion too)")
    print(f"raw log {raw_size / 1e6:.1f} MB; conversion after the run took {conv_s:.1f} s")


if __name__ == "__main__":
    main()
