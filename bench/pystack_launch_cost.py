"""Added cost of Python stacks at kernel launches, 1 in N (pystack family).

    sudo python bench/pystack_launch_cost.py [--calls 50000] [--reps 3] [--depth 20] [--every 1,4,16,64]

A Python target calls NVIDIA's real libcudart cudaLaunchKernel through
ctypes `--calls` times from `--depth` nested Python frames, timing the loop
with perf_counter.  Without a GPU every call returns an error at once: the
time is ctypes + the library's entry + the probes.  Runs alternate, in one
invocation: untraced, `-e cuda` (the cuda family alone), then `-e
cuda,pystack --py-launch-every N` for each N; `--reps` times each.
Reported per mode: the median ns per launch on the target's clock, and
the kernel's own count of the pystack program's time per launch
(kernel.bpf_stats_enabled, tl_py_call's run_time_ns / run_cnt, read from the
recorder's fdinfo while it runs): steadier on a busy host, but without the
uprobe's dispatch to a second consumer.  The stack repeats (one walk and a
40-byte record per stack taken, no new stack to send).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead_accounting import STATS, ProgWatch  # noqa: E402

TARGET = r"""
import ctypes, sys, time
class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]
launch = ctypes.CDLL(sys.argv[1]).cudaLaunchKernel
launch.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
n, depth = int(sys.argv[2]), int(sys.argv[3])
g, b = Dim3(1, 1, 1), Dim3(32, 1, 1)
def loop(k):
    if k:
        return loop(k - 1)
    launch(None, g, b, None, 0, None)
    t0 = time.perf_counter()
    for _ in range(n):
        launch(None, g, b, None, 0, None)
    return time.perf_counter() - t0
time.sleep(float(sys.argv[4]))  # the recorder finds the interpreter and the library
print("ns_per_call %.1f" % (loop(depth) / n * 1e9))
"""


def libcudart() -> str:
    import nvidia.cuda_runtime as m  # the nvidia-cuda-runtime-cu12 wheel
    return os.path.join(list(m.__path__)[0], "lib", "libcudart.so.12")


def run(cmd: list[str]) -> tuple[float, dict[str, tuple[int, int]]]:
    """(ns per launch in the target, {program: (run_time_ns, run_cnt)} of the recorder's programs)."""
    p = psutil.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    watch = ProgWatch(p.pid)
    while p.poll() is None:
        watch.rescan()
        watch.read()
        time.sleep(0.05)
    out = p.stdout.read()
    watch.close()
    per_call = float(next(line.split()[1] for line in out.splitlines() if line.startswith("ns_per_call")))
    return per_call, {watch.names.get(i, str(i)): v for i, v in watch.stats.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--depth", type=int, default=20, help="Python frames above the call")
    ap.add_argument("--every", default="1,4,16,64", help="--py-launch-every values compared")
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the target")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: run with sudo")
    lib = libcudart()
    old = open(STATS).read().strip()
    with open(STATS, "w") as f:
        f.write("1")
    try:
        with tempfile.TemporaryDirectory() as d:
            target = os.path.join(d, "target.py")
            with open(target, "w") as f:
                f.write(TARGET)
            base = [args.python, target, lib, str(args.calls), str(args.depth)]
            tl = [sys.executable, "-m", "timeline.cli", "record", "-q", "--raw-only", "-o",
                  os.path.join(d, "r.tlraw"), "--cuda-lib", lib, "--py-sample-hz", "0"]
            modes = {"untraced": base + ["0"], "cuda": tl + ["-e", "cuda", "--"] + base + ["0.5"]}
            for n in args.every.split(","):
                modes[f"pystack 1/{n}"] = tl + ["-e", "cuda,pystack", "--py-launch-every", n, "--"] + base + ["0.5"]
            times: dict[str, list[float]] = {m: [] for m in modes}
            bpf: dict[str, list[float]] = {m: [] for m in modes}
            for _ in range(args.reps):
                for name, cmd in modes.items():
                    t, progs = run(cmd)
                    times[name].append(t)
                    rt = progs.get("tl_py_call", (0, 0))[0]
                    bpf[name].append(rt / (args.calls + 1))
    finally:
        with open(STATS, "w") as f:
            f.write(old)
    med = {m: statistics.median(v) for m, v in times.items()}
    print(f"python {args.python}, {args.calls:,} launches x {args.reps} runs, {args.depth} frames deep")
    for m, v in med.items():
        extra = ""
        if m.startswith("pystack"):
            extra = (f"   +{v - med['cuda']:6.1f} ns over cuda;  tl_py_call {statistics.median(bpf[m]):6.1f} ns "
                     "per launch in BPF")
        print(f"  {m:14} {v:8.1f} ns/launch  (runs: {', '.join(f'{x:.0f}' for x in times[m])}){extra}")
    print(f"  cuda probes add {med['cuda'] - med['untraced']:8.1f} ns/launch")


if __name__ == "__main__":
    main()
