"""Added cost per traced CUDA call, per probe mode (issue 6, workload 1).

    sudo python bench/cuda_probe_cost.py [--calls 200000] [--reps 5]

A C loop (compiled here with cc) dlopens NVIDIA's real libcudart from the
nvidia-cuda-runtime-cu12 wheel and calls cudaLaunchKernel, then cudaMemcpy,
`--calls` times each, timing each loop with CLOCK_MONOTONIC.  Without a GPU
every call returns 35 at once, which is what we want: the measured time is
the library's own entry cost plus whatever the probes add.  Runs alternate
untraced / `--cuda-mode entry-only` / `--cuda-mode full` (only the cuda
family is recorded), `--reps` times; reported are medians in ns per call and
the added cost of each mode.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import site
import statistics
import subprocess
import sys
import tempfile

LOOP_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct { unsigned x, y, z; } dim3;
typedef int (*launch_t)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*memcpy_t)(void *, const void *, size_t, int);

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    long n = atol(argv[2]);
    launch_t launch = (launch_t)dlsym(h, "cudaLaunchKernel");
    memcpy_t copy = (memcpy_t)dlsym(h, "cudaMemcpy");
    dim3 g = {128, 1, 1}, b = {256, 1, 1};
    launch((void *)0x1234, g, b, NULL, 0, NULL);  /* first call initialises the runtime */
    double t0 = now();
    for (long i = 0; i < n; i++) launch((void *)0x1234, g, b, NULL, 0, NULL);
    double t1 = now();
    for (long i = 0; i < n; i++) copy((void *)0x10, (void *)0x20, 4096, 1);
    double t2 = now();
    printf("launch_ns %.1f\nmemcpy_ns %.1f\n", (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9);
    return 0;
}
"""


def libcudart() -> str:
    for d in site.getsitepackages():
        hits = glob.glob(os.path.join(d, "nvidia", "cuda_runtime", "lib", "libcudart.so.12"))
        if hits:
            return hits[0]
    raise SystemExit("libcudart.so.12 not found: pip install nvidia-cuda-runtime-cu12")


def run(cmd: list[str]) -> dict[str, float]:
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if cp.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{cp.stderr[-2000:]}")
    return {k: float(v) for k, v in re.findall(r"(\w+_ns) ([\d.]+)", cp.stdout)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: run with sudo")
    lib = libcudart()
    with tempfile.TemporaryDirectory(prefix="tl-cudacost-") as d:
        src, exe = os.path.join(d, "loop.c"), os.path.join(d, "loop")
        with open(src, "w") as f:
            f.write(LOOP_C)
        subprocess.run(["cc", "-O2", "-o", exe, src, "-ldl"], check=True)
        loop = [exe, lib, str(args.calls)]
        rec = [sys.executable, "-m", "timeline.cli", "record", "-q", "--raw-only", "-o", os.path.join(d, "r.tlraw"),
               "--events", "cuda", "--cuda-lib", lib]
        modes = {"untraced": loop,
                 "entry-only": [*rec, "--cuda-mode", "entry-only", "--", *loop],
                 "full": [*rec, "--cuda-mode", "full", "--", *loop]}
        samples: dict[str, list[dict]] = {m: [] for m in modes}
        for rep in range(args.reps):
            for m, cmd in modes.items():
                samples[m].append(run(cmd))
            print(f"  rep {rep + 1}/{args.reps} done", file=sys.stderr, flush=True)
    print(f"{args.calls:,} calls per loop, median of {args.reps} runs, real libcudart ({lib})")
    print(f"{'mode':12s} {'launch ns/call':>15s} {'added':>9s} {'memcpy ns/call':>15s} {'added':>9s}")
    base = {k: statistics.median(s[k] for s in samples["untraced"]) for k in ("launch_ns", "memcpy_ns")}
    for m in modes:
        med = {k: statistics.median(s[k] for s in samples[m]) for k in ("launch_ns", "memcpy_ns")}
        print(f"{m:12s} {med['launch_ns']:15.0f} {med['launch_ns'] - base['launch_ns']:+9.0f} "
              f"{med['memcpy_ns']:15.0f} {med['memcpy_ns'] - base['memcpy_ns']:+9.0f}")
    print("entry-only applies to kernel launches; other calls (cudaMemcpy) are traced in full in both modes.")


if __name__ == "__main__":
    main()
