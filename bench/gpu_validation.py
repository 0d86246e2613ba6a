"""Check timeline's CUDA calls against the PyTorch profiler on a real GPU.

    sudo python bench/gpu_validation.py record [--model cnn] [--steps 60] [--out DIR]
    python bench/gpu_validation.py compare DIR/validation-cnn.json

`record` (needs a GPU and root) runs examples/train_cpu.py --device cuda under
`timeline record` with torch.profiler (CPU + CUDA activities) inside the same
process, so both tools see exactly the same calls.  The timed steps sit in a
'timeline_window' annotation; the script also prints that window on
CLOCK_BOOTTIME, timeline's trace clock.  Written to DIR: the trace, the
profiler's counts per CUDA API name inside the window, kernel names, and the
environment (GPU, driver, kernel, torch).

`compare` (anywhere: trace_processor, wasm engine by default) counts the
trace's CUDA slices per name inside the same window and prints both columns:
a call probed by timeline should have the same count in both; calls the
profiler sees that timeline does not probe are listed apart.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
WORKLOAD = os.path.join(REPO, "examples", "train_cpu.py")


def _sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({e})"


def environment() -> dict:
    torch_info = _sh([sys.executable, "-c", "import torch;print(torch.__version__, torch.version.cuda, "
                      "torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"])
    return {"kernel": platform.release(), "gpu": _sh(["nvidia-smi", "--query-gpu=name,driver_version",
                                                       "--format=csv,noheader"]),
            "torch": torch_info, "python": sys.version.split()[0],
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def profiler_counts(path: str) -> dict:
    """Runtime/driver API calls and GPU activities inside the 'timeline_window' annotation."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    win = next(e for e in events if e.get("name") == "timeline_window" and e.get("ph") == "X")
    lo, hi = win["ts"], win["ts"] + win["dur"]
    api: collections.Counter = collections.Counter()
    kernels: collections.Counter = collections.Counter()
    gpu: collections.Counter = collections.Counter()
    for e in events:
        cat, ts = e.get("cat"), e.get("ts")
        if e.get("ph") != "X" or ts is None:
            continue
        if cat in ("cuda_runtime", "cuda_driver") and lo <= ts <= hi:
            api[(cat, e["name"])] += 1
        elif cat == "kernel" and "External id" in e.get("args", {}):
            # GPU activities over the whole profile (names for the kernel-name check)
            gpu[cat] += 1
            kernels[e["name"]] += 1
        elif cat in ("gpu_memcpy", "gpu_memset"):
            gpu[cat] += 1
    return {"window_us": [lo, hi],
            "api": [{"category": c, "name": n, "count": k} for (c, n), k in sorted(api.items())],
            "kernels_all_steps": kernels.most_common(), "gpu_activities_all_steps": dict(gpu)}


def record(args: argparse.Namespace) -> None:
    if os.geteuid() != 0:
        raise SystemExit("record needs root (eBPF): run with sudo")
    os.makedirs(args.out, exist_ok=True)
    trace = os.path.join(args.out, f"gpu-{args.model}.pftrace")
    prof_json = os.path.join(args.tmp, f"torch-profile-{args.model}.json")
    cmd = [sys.executable, "-m", "timeline.cli", "record", "-o", trace, *args.record_args.split(), "--",
           sys.executable, WORKLOAD, "--device", args.device, "--model", args.model, "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--workers", "2", "--profiler", "torch", "--profile-out", prof_json]
    print("+", " ".join(cmd), flush=True)
    t = time.perf_counter()
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=REPO)
    wall = time.perf_counter() - t
    sys.stdout.write(cp.stdout[-4000:])
    sys.stderr.write(cp.stderr[-6000:])
    m = re.search(r"WINDOW boottime_ns (\d+) (\d+)", cp.stdout)
    if cp.returncode != 0 or m is None:
        raise SystemExit(f"recording failed (exit {cp.returncode})")
    out = {"model": args.model, "steps": args.steps, "warmup": args.warmup, "trace": os.path.basename(trace),
           "window_boottime_ns": [int(m.group(1)), int(m.group(2))], "record_wall_s": wall,
           "record_summary": cp.stderr[-6000:], "env": environment(), "profiler": profiler_counts(prof_json)}
    path = os.path.join(args.out, f"validation-{args.model}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {path} and {trace}")


LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz",
            "cudaLaunchCooperativeKernel", "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx",
            "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel"}
MEMSETS = {"cudaMemset", "cudaMemsetAsync", "cudaMemsetAsync_ptsz", "cuMemsetD8Async", "cuMemsetD16Async",
           "cuMemsetD32Async", "cuMemsetD8_v2", "cuMemsetD16_v2", "cuMemsetD32_v2", "cuMemsetD8Async_ptsz",
           "cuMemsetD32Async_ptsz"}


def trace_counts(trace: str, lo: int, hi: int) -> tuple[dict, list]:
    from timeline.trace_processor import open_trace

    with open_trace(trace) as tp:
        rows = tp.query(f"""
            SELECT s.category AS category, s.name AS name, count(*) AS n
            FROM slice s WHERE s.ts >= {lo} AND s.ts <= {hi}
              AND s.category IN ('cuda', 'cuda_driver', 'nccl')
            GROUP BY 1, 2""").as_dicts()
        kernels = tp.query(f"""
            SELECT a.display_value AS kernel, count(*) AS n
            FROM slice s JOIN args a USING (arg_set_id)
            WHERE s.ts >= {lo} AND s.ts <= {hi} AND a.key = 'debug.kernel'
            GROUP BY 1 ORDER BY 2 DESC""").as_dicts()
    return {(r["category"], r["name"]): r["n"] for r in rows}, [(r["kernel"], r["n"]) for r in kernels]


def compare(args: argparse.Namespace) -> None:
    from timeline.cuda.probes import BY_NAME

    with open(args.validation) as f:
        v = json.load(f)
    trace = os.path.join(os.path.dirname(os.path.abspath(args.validation)), v["trace"])
    lo, hi = v["window_boottime_ns"]
    ours, kernels = trace_counts(trace, lo, hi)
    probed = set(BY_NAME)
    ours_by_name = collections.Counter()
    for (_, name), n in ours.items():
        ours_by_name[name] += n
    prof = {(r["name"]): r["count"] for r in v["profiler"]["api"]}
    print(f"{v['env']['gpu']} | {v['env']['torch']} | kernel {v['env']['kernel']}")
    print(f"model {v['model']}: {v['steps']} steps in the window ({(hi - lo) / 1e6:.1f} ms)\n")
    print(f"{'call':40s} {'torch.profiler':>15s} {'timeline':>9s}")
    same = differ = 0
    for name in sorted(set(prof) | set(ours_by_name)):
        if name not in probed:
            continue
        p, o = prof.get(name, 0), ours_by_name.get(name, 0)
        mark = "" if p == o else "   <-- differs"
        same += p == o
        differ += p != o
        print(f"{name:40s} {p:15d} {o:9d}{mark}")
    unprobed = {n: k for n, k in prof.items() if n not in probed}
    print(f"\n{same} probed calls agree, {differ} differ.")
    # cuBLAS/cuDNN carry a static copy of the runtime: the profiler (CUPTI) sees
    # those calls as runtime calls, uprobes only as the driver calls they make.
    for what, names in (("kernel launches, any API", LAUNCHES), ("memsets, any API", MEMSETS)):
        p = sum(k for n, k in prof.items() if n in names)
        o = sum(k for n, k in ours_by_name.items() if n in names)
        print(f"{what:40s} {p:15d} {o:9d}{'' if p == o else '   <-- differs'}")
    if unprobed:
        print("seen by torch.profiler, not probed by timeline: "
              + ", ".join(f"{n} ({k})" for n, k in sorted(unprobed.items(), key=lambda x: -x[1])))
    prof_kernels = {name for name, _ in v["profiler"]["kernels_all_steps"]}
    named = [(k, n) for k, n in kernels if k in prof_kernels]
    total = sum(n for _, n in kernels)
    print(f"\nkernel names on launches in the window: {sum(n for _, n in named)}/{total} launches carry a name "
          "that torch.profiler also reports for a GPU kernel")
    for k, n in kernels[:12]:
        print(f"  {n:6d}  {'=' if k in prof_kernels else '?'} {k[:110]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"agree": same, "differ": differ, "unprobed": unprobed,
                       "ours": {n: k for n, k in ours_by_name.items()}, "kernels": kernels[:50]}, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record a GPU training run with timeline and torch.profiler (root, GPU)")
    r.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    r.add_argument("--steps", type=int, default=60)
    r.add_argument("--warmup", type=int, default=20)
    r.add_argument("--out", default="gpu-validation")
    r.add_argument("--device", default="cuda", help="cuda; cpu only to try the script without a GPU")
    r.add_argument("--tmp", default="/tmp")
    r.add_argument("--timeout", type=float, default=300)
    r.add_argument("--record-args", default="", help="extra `timeline record` options, space separated")
    c = sub.add_parser("compare", help="compare a recorded trace with the profiler's counts")
    c.add_argument("validation", help="validation-MODEL.json written by record")
    c.add_argument("--json", help="also write the comparison here")
    args = ap.parse_args()
    record(args) if args.cmd == "record" else compare(args)


if __name__ == "__main__":
    main()
