"""Added cost of Python stacks per synchronizing CUDA call (pystack family).

    sudo python bench/pystack_cost.py [--calls 100000] [--reps 5] [--depth 20] [--python PATH]

A Python target (the interpreter under test) calls NVIDIA's real libcudart
cudaStreamSynchronize through ctypes `--calls` times from `--depth` nested
Python frames, timing the loop with perf_counter.  Without a GPU every call
returns 35 at once: the time is ctypes + the library's entry + the probes.
Runs alternate, in one invocation: untraced, `-e cuda` (the cuda family
alone), `-e cuda,pystack` (its probes plus a Python stack per call); `--reps`
times each; reported are medians in ns per call and what pystack adds over
the cuda family alone, and the time its BPF programs spent per stack (the
recording's own count, py_stats: steadier than the target's on a busy host; it
counts from the call's probe's first clock read to its last; not printed where the cuda
family's programs run the walks, which then read no clock: use --bpf-stats).  On a shared host
the target's clock is noisy: the difference of the fastest runs of each mode is
printed too (other load only adds time), and the steadiest measure here: each run's fastest
1,000 consecutive calls (the loop is timed in batches of 1,000), medians over runs; the
thread's CPU time is printed as well (it was as noisy as the clock here).  The stack repeats, so after the first call each
costs the walk and one 40-byte record (no new stack to send).  `--bpf-stats` also reports the
kernel's count of the programs the call runs, per call (kernel.bpf_stats_enabled, read from
the recorder's fdinfo: the cuda family's entry program with the pystack hook it tail-calls,
or tl_py_call where pystack has its own uprobe; not the uprobe's dispatch to them; the
count's own clock reads slow every probed call a little, so compare runs made alike);
`--no-frame-by-frame` leaves out the mode that reads each frame on its own.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead_accounting import STATS, ProgWatch  # noqa: E402

TARGET = r"""
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1])
sync = lib.cudaStreamSynchronize
sync.argtypes = [ctypes.c_void_p]
n, depth = int(sys.argv[2]), int(sys.argv[3])
def loop(k):
    if k:
        return loop(k - 1)
    sync(None)
    t0, c0, best = time.perf_counter(), time.thread_time(), float("inf")
    for _ in range(n // 1000):
        b0 = time.perf_counter()
        for _ in range(1000):
            sync(None)
        best = min(best, time.perf_counter() - b0)
    return time.perf_counter() - t0, time.thread_time() - c0, best
time.sleep(float(sys.argv[4]))  # the recorder finds the interpreter and the library
wall, cpu, best = loop(depth)
print("ns_per_call %.1f" % (wall / n * 1e9))
print("cpu_ns_per_call %.1f" % (cpu / n * 1e9))
print("best_ns_per_call %.1f" % (best / 1000 * 1e9))
"""


# The programs a probed call runs (--bpf-stats): the cuda family's entry programs,
# whose count holds the tail-called tl_py_hook too (a tail call is no run of its
# own), and pystack's own uprobe program where it has one.
HIT_PROGRAMS = ("tl_cuda_enter", "tl_cuda_entry", "tl_py_call")


def libcudart() -> str:
    import nvidia.cuda_runtime as m  # the nvidia-cuda-runtime-cu12 wheel
    return os.path.join(list(m.__path__)[0], "lib", "libcudart.so.12")


def run(cmd: list[str], env: dict, raw: str | None) -> tuple[float, float, float, float | None, int]:
    """(ns per call in the target, its thread's CPU ns per call, the fastest 1,000 calls' ns per
    call, ns per stack in BPF from the raw log's py_stats if any, HIT_PROGRAMS' run_time_ns in the
    kernel's count, 0 without one)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env={**os.environ, **env})
    watch = ProgWatch(p.pid)
    while p.poll() is None:
        watch.rescan()
        watch.read()
        time.sleep(0.05)
    out = p.stdout.read()
    watch.close()
    if p.returncode:
        raise SystemExit(f"{cmd} failed: {p.returncode}")
    prog_ns = sum(v[0] for i, v in watch.stats.items() if watch.names.get(i) in HIT_PROGRAMS)
    per_call = float(next(line.split()[1] for line in out.splitlines() if line.startswith("ns_per_call")))
    cpu = float(next(line.split()[1] for line in out.splitlines() if line.startswith("cpu_ns_per_call")))
    best = float(next(line.split()[1] for line in out.splitlines() if line.startswith("best_ns_per_call")))
    walk = None
    if raw:
        from timeline.rawlog import KIND_META, RawLogReader
        with RawLogReader(raw) as r:
            for blk in r.blocks():
                meta = blk.json() if blk.kind == KIND_META else {}
                # walk_ns counts the timed walks, not those at calls run through the cuda
                # family's hook (no clock read of their own: --bpf-stats counts those)
                if meta.get("type") == "py_stats" and meta.get("walks") and "timed_walks" not in meta:
                    walk = meta["walk_ns"] / meta["walks"]  # a tree before timed_walks: all walks
                elif meta.get("type") == "py_stats" and meta.get("timed_walks") and not meta.get("call_hooks"):
                    walk = meta["walk_ns"] / meta["timed_walks"]
    return per_call, cpu, best, walk, prog_ns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--depth", type=int, default=20, help="Python frames above the call")
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the target")
    ap.add_argument("--bpf-stats", action="store_true", help="count the time of the programs the call runs in the kernel")
    ap.add_argument("--no-frame-by-frame", action="store_true", help="leave out the frame-by-frame mode")
    args = ap.parse_args()
    lib = libcudart()
    old_stats = open(STATS).read().strip()
    if args.bpf_stats:
        with open(STATS, "w") as f:
            f.write("1")
    try:
        times, cpus, bests, walks, progs = measure(args, lib)
    finally:
        if args.bpf_stats:
            with open(STATS, "w") as f:
                f.write(old_stats)
    med = {m: statistics.median(v) for m, v in times.items()}
    print(f"python {args.python}, {args.calls:,} calls x {args.reps} runs, {args.depth} frames deep")
    for m, v in med.items():
        inside = (f"   BPF: {statistics.median(walks[m]):.0f} ns per stack taken (min {min(walks[m]):.0f})"
                  if walks[m] else "")
        if progs[m]:
            inside += f", programs {statistics.median(progs[m]):.0f} ns per call (min {min(progs[m]):.0f})"
        print(f"  {m:14} {v:8.1f} ns/call   (runs: {', '.join(f'{x:.0f}' for x in times[m])}){inside}")
    print(f"  cuda probes add     {med['cuda'] - med['untraced']:8.1f} ns/call")
    print(f"  pystack adds        {med['cuda+pystack'] - med['cuda']:8.1f} ns/call over the cuda family alone")
    low = {m: min(v) for m, v in times.items()}  # other load only adds: the fastest runs are the least disturbed
    print(f"    fastest runs: {low['cuda+pystack'] - low['cuda']:8.1f} ns/call ({low['cuda+pystack']:.0f} - {low['cuda']:.0f})")
    # The target thread's CPU time (the probes run in it, in the kernel): other load on the
    # machine takes the CPU away between calls but adds little to this.
    cmed = {m: statistics.median(v) for m, v in cpus.items()}
    clow = {m: min(v) for m, v in cpus.items()}
    print(f"  thread CPU time: pystack adds {cmed['cuda+pystack'] - cmed['cuda']:8.1f} ns/call (medians), "
          f"{clow['cuda+pystack'] - clow['cuda']:.1f} (fastest runs); cuda alone "
          f"{cmed['cuda'] - cmed['untraced']:.1f}")
    # The fastest 1,000 calls of each run: what the calls cost when nothing else ran.
    bmed = {m: statistics.median(v) for m, v in bests.items()}
    print(f"  fastest 1,000 calls of a run: pystack adds {bmed['cuda+pystack'] - bmed['cuda']:8.1f} ns/call "
          f"(medians over runs; {min(bests['cuda+pystack']) - min(bests['cuda']):.1f} the fastest)")
    if progs["cuda"] and progs["cuda+pystack"]:
        print(f"  BPF programs of the call (kernel's count): pystack adds "
              f"{statistics.median(progs['cuda+pystack']) - statistics.median(progs['cuda']):8.1f} ns/call (medians)")
    if "  frame by frame" in med:
        print(f"  ... reading each frame on its own {med['  frame by frame'] - med['cuda']:8.1f} ns/call")


def measure(args, lib: str) -> tuple[dict, dict, dict, dict, dict]:
    with tempfile.TemporaryDirectory() as d:
        target = os.path.join(d, "target.py")
        with open(target, "w") as f:
            f.write(TARGET)
        base = [args.python, target, lib, str(args.calls), str(args.depth)]
        tl = [sys.executable, "-m", "timeline.cli", "record", "--raw-only", "-o", os.path.join(d, "r.tlraw"),
              "--cuda-lib", lib]
        modes = {"untraced": (base + ["0"], {}),
                 "cuda": (tl + ["-e", "cuda", "--"] + base + ["0.5"], {}),
                 "cuda+pystack": (tl + ["-e", "cuda,pystack", "--"] + base + ["0.5"], {}),
                 "  frame by frame": (tl + ["-e", "cuda,pystack", "--"] + base + ["0.5"],
                                      {"TIMELINE_PYSTACK_NO_CHUNK": "1"})}
        if args.no_frame_by_frame:
            del modes["  frame by frame"]
        times: dict[str, list[float]] = {m: [] for m in modes}
        cpus: dict[str, list[float]] = {m: [] for m in modes}
        bests: dict[str, list[float]] = {m: [] for m in modes}
        walks: dict[str, list[float]] = {m: [] for m in modes}
        progs: dict[str, list[float]] = {m: [] for m in modes}
        raw = os.path.join(d, "r.tlraw")
        for _ in range(args.reps):
            for name, (cmd, env) in modes.items():
                t, c, b, w, prog_ns = run(cmd, env, raw if "pystack" in " ".join(cmd) else None)
                times[name].append(t)
                cpus[name].append(c)
                bests[name].append(b)
                if w is not None:
                    walks[name].append(w)
                if prog_ns:
                    progs[name].append(prog_ns / (args.calls + 1))
    return times, cpus, bests, walks, progs


if __name__ == "__main__":
    main()
