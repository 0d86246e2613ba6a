"""Conversion into a trace set (--split) against the same log converted whole.

Two synthetic logs: the GPU launch loop of bench/gpu_convert_speed.py (CUDA
call slices, GPU kernels on 2 GPUs x 4 streams, flows between them, NVTX) and
a sched-only log (context switches on 4 CPUs, tests/rawlog_factory.many_switches).
Each is converted whole, then split into N chunks by events; every conversion
runs in a child process of its own, its peak RSS read from VmHWM (ru_maxrss
would carry the parent's over exec).

    python bench/trace_set_speed.py [--launches 300000] [--switches 3000000] [--chunks 2,8,32]

Prints, per log and chunk count: wall time, peak RSS, output size, and the
split/whole ratios of time and RSS measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

CHILD = """
import json, sys, time
from timeline.converters import convert
from timeline.converters.trace_set import SplitSpec
raw, out, events = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = time.perf_counter()
res = convert(raw, out, split=SplitSpec(events=events) if events else None)
s = time.perf_counter() - t
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))  # reset at exec
print(json.dumps({"s": s, "rss": hwm * 1024,
                  "bytes": res.out_bytes, "events": res.events, "chunks": len(res.chunks or [0])}))
"""


def run(raw: str, out: str, events: int) -> dict:
    cp = subprocess.run([sys.executable, "-c", CHILD, raw, out, str(events)], capture_output=True, text=True,
                        check=True)
    return json.loads(cp.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=300_000)
    ap.add_argument("--switches", type=int, default=3_000_000)
    ap.add_argument("--chunks", default="2,8,32")
    a = ap.parse_args()
    from gpu_convert_speed import build
    from rawlog_factory import many_switches

    with tempfile.TemporaryDirectory() as d:
        logs = []
        gpu = os.path.join(d, "gpu.tlraw")
        build(gpu, a.launches)
        logs.append(("gpu launch loop", gpu))
        sched = many_switches(os.path.join(d, "sched.tlraw"), a.switches, block=30_000)
        logs.append(("sched only", sched))
        print(f"{'log':18} {'chunks':>6} {'wall s':>7} {'peak RSS MB':>11} {'out MB':>7} {'time x':>7} {'RSS x':>6}")
        for name, raw in logs:
            whole = run(raw, os.path.join(d, "w.pftrace"), 0)
            print(f"{name:18} {1:>6} {whole['s']:>7.2f} {whole['rss'] / 2**20:>11.0f} {whole['bytes'] / 2**20:>7.1f}")
            for n in (int(x) for x in a.chunks.split(",")):
                per = max(1000, whole["events"] // n + 1)
                r = run(raw, os.path.join(d, f"s{n}.pftrace"), per)
                print(f"{name:18} {r['chunks']:>6} {r['s']:>7.2f} {r['rss'] / 2**20:>11.0f} {r['bytes'] / 2**20:>7.1f} "
                      f"{r['s'] / whole['s']:>7.2f} {r['rss'] / whole['rss']:>6.2f}")


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"({time.time() - t0:.0f} s, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
