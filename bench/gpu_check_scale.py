"""How gpu_breakdown and host_gpu_gaps grow with the number of kernels (issue 23).

    python bench/gpu_check_scale.py [--kernels 10000,40000,160000] [--tree DIR ...] [--keep DIR]

Builds bench/scale_8gpu.py's synthetic 8-GPU node (its raw log, converted to one .pftrace) at
each size, N kernels per GPU (N / 600k recorded minutes: 10k launches/s per rank), then checks
each trace with the two checks in a child process per source tree (--tree, default this one; give
a second checkout of an older commit to compare): wasm load, prelude, and each check's seconds,
then the growth factor per size step. Each tree's findings must be the same as the first tree's
(numbers differing in float rounding only): the script says where they differ.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

CHECKS = ["gpu_breakdown", "host_gpu_gaps"]
KERNELS_PER_MINUTE = 600_000   # scale_8gpu: 10k launches/s per rank (GPU)

# Run in a child with PYTHONPATH=<tree>: loads the trace, times the prelude and the checks.
CHILD = """
import json, sys, time
from timeline.checks import run_checks
from timeline.trace_processor import open_trace
t = time.perf_counter()
tp = open_trace(sys.argv[1], engine="wasm")
load = time.perf_counter() - t
try:
    t = time.perf_counter()
    rep = run_checks(tp, sys.argv[1], only=sys.argv[2].split(","))
    total = time.perf_counter() - t
finally:
    tp.close()
secs = {r.check.id: r.seconds for r in rep.results}
print(json.dumps({"load": load, "prelude": total - sum(secs.values()), "secs": secs,
                  "findings": {r.check.id: [r.status, r.error] + [[f.severity, f.message, f.ts, f.dur, f.evidence]
                                                                  for f in r.findings] for r in rep.results}}))
"""


def build_trace(d: str, kernels: int) -> str:
    from scale_8gpu import build
    from timeline.converters import convert

    raw = os.path.join(d, f"gpu8-{kernels}.tlraw")
    out = os.path.join(d, f"gpu8-{kernels}.pftrace")
    if not os.path.exists(out):
        build(raw, kernels / KERNELS_PER_MINUTE)
        convert(raw, out)
        os.unlink(raw)
    return out


def check(tree: str, trace: str) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    p = subprocess.run([sys.executable, "-c", CHILD, trace, ",".join(CHECKS)], cwd=tree, env=env,
                       capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"checking {trace} with {tree} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def differences(a, b, where: str = "") -> list[str]:
    """Where two findings structures differ; floats equal to 1e-9 relative count as equal."""
    if isinstance(a, float) or isinstance(b, float):
        ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= 1e-9 * max(abs(a), 1)
        return [] if ok else [f"{where}: {a!r} != {b!r}"]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return [d for k in a for d in differences(a[k], b[k], f"{where}.{k}")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default="10000,40000,160000", help="kernels per GPU, one trace per value")
    ap.add_argument("--tree", action="append", help="source tree to check with (repeatable; default: this one)")
    ap.add_argument("--max-kernels", type=int, action="append",
                    help="per --tree: its largest size (a quadratic tree takes hours on the largest)")
    ap.add_argument("--keep", help="directory for the traces (kept; reused when present)")
    a = ap.parse_args()
    sizes = [int(x) for x in a.kernels.split(",")]
    trees = [os.path.abspath(t) for t in (a.tree or [ROOT])]
    caps = (a.max_kernels or []) + [max(sizes)] * len(trees)
    d = os.path.abspath(a.keep or tempfile.mkdtemp(prefix="tl-gpucheck-"))
    os.makedirs(d, exist_ok=True)
    print(f"8 GPUs, {os.cpu_count()} CPUs here, load {os.getloadavg()[0]:.1f}", flush=True)
    try:
        traces = {}
        for n in sizes:
            t = time.perf_counter()
            traces[n] = build_trace(d, n)
            print(f"{n:,} kernels per GPU: {os.path.getsize(traces[n]) / 1e6:.0f} MB trace, built in "
                  f"{time.perf_counter() - t:.0f} s", flush=True)
        res: dict[tuple[int, int], dict] = {}
        for n in sizes:
            for i, tree in enumerate(trees):
                if n > caps[i]:
                    continue
                r = res[i, n] = check(tree, traces[n])
                print(f"  {n:>8,}/GPU  tree {i} ({tree}): load {r['load']:.1f} s, prelude {r['prelude']:.1f} s, "
                      + ", ".join(f"{c} {r['secs'][c]:.2f} s" for c in CHECKS), flush=True)
                if i and (0, n) in res:
                    diff = differences(res[0, n]["findings"], r["findings"])
                    print(f"      findings vs tree 0: {'same' if not diff else 'DIFFER'}", flush=True)
                    for x in diff[:20]:
                        print(f"        {x}")
        print("\n| kernels per GPU | " + " | ".join(f"{c} (tree {i})" for i in range(len(trees)) for c in CHECKS)
              + " |\n|---:|" + "---:|" * (len(trees) * len(CHECKS)))
        for k, n in enumerate(sizes):
            cells = []
            for i in range(len(trees)):
                for c in CHECKS:
                    if (i, n) not in res:
                        cells.append("—")
                        continue
                    s = res[i, n]["secs"][c]
                    prev = (i, sizes[k - 1]) if k else None
                    grow = f" (×{s / res[prev]['secs'][c]:.1f})" if prev in res and res[prev]["secs"][c] > 0 else ""
                    cells.append(f"{s:.2f} s{grow}")
            print(f"| {n:,} | " + " | ".join(cells) + " |")
    finally:
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
