"""What CPU sampling of Python stacks costs, for a target with 4 spinning Python threads.

    sudo python bench/pystack_sampling_cost.py [--seconds 10] [--threads 4] [--hz 99] [--reps 2]

The target runs `--threads` Python threads that spin (a loop of calls, 8
frames deep) for `--seconds`.  Recorded with `-e pystack`, runs alternate in
one invocation between `--py-sample-hz HZ` and `--py-sample-hz 0` (sampling
off: the same family, waits and exec/fork handling still on).  Measured per
run, while the target runs:
- BPF: the kernel's run time of the recorder's programs
  (kernel.bpf_stats_enabled, read from the recorder's fdinfo): tl_py_sample
  and the rest;
- recorder: CPU time of the timeline process (all its threads, schedstat)
  from the target's start to its end.
Reported as % of one core over the target's wall time: (BPF + recorder)
with sampling on, off, and the difference (what sampling adds).  The timer
interrupt's own cost (a perf_event hrtimer per CPU) is not in either count.
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
from overhead_accounting import STATS, ProgWatch, thread_ns  # noqa: E402

TARGET = r"""
import sys, threading, time
seconds, nthreads = float(sys.argv[1]), int(sys.argv[2])
def leaf(x):
    return x * 3 + 1
def spin(k, stop):
    if k:
        return spin(k - 1, stop)
    n = 0
    while time.monotonic() < stop:
        for i in range(1000):
            n += leaf(i)
    return n
time.sleep(0.5)  # the recorder finds the interpreter
print("start", flush=True)
stop = time.monotonic() + seconds
ts = [threading.Thread(target=spin, args=(8, stop)) for _ in range(nthreads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("end", flush=True)
"""


def one(cmd: list[str]) -> dict:
    p = psutil.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    watch, seen = ProgWatch(p.pid), {}
    t0 = rec0 = None
    bpf0: dict = {}
    os.set_blocking(p.stdout.fileno(), False)
    buf = ""
    while p.poll() is None:
        watch.rescan()
        watch.read()
        rec = thread_ns(p.pid, seen)
        try:
            buf += os.read(p.stdout.fileno(), 4096).decode()
        except BlockingIOError:
            pass
        if t0 is None and "start" in buf:
            t0, rec0, bpf0 = time.perf_counter(), rec, dict(watch.stats)
        if t0 is not None and "end" in buf:
            wall = time.perf_counter() - t0
            bpf = {watch.names.get(i, str(i)): rt - bpf0.get(i, (0, 0))[0] for i, (rt, _) in watch.stats.items()}
            rec_s = (rec - rec0) / 1e9
            p.wait()
            watch.close()
            return {"wall": wall, "rec": rec_s, "bpf": sum(bpf.values()) / 1e9,
                    "sample": bpf.get("tl_py_sample", 0) / 1e9}
        time.sleep(0.02)
    watch.close()
    raise SystemExit("the target ended before it said so: " + buf)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--hz", type=int, default=99)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the target")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: run with sudo")
    old = open(STATS).read().strip()
    with open(STATS, "w") as f:
        f.write("1")
    res: dict[str, list[dict]] = {"on": [], "off": []}
    try:
        with tempfile.TemporaryDirectory() as d:
            target = os.path.join(d, "spin.py")
            with open(target, "w") as f:
                f.write(TARGET)
            for _ in range(args.reps):
                for mode, hz in (("on", args.hz), ("off", 0)):
                    cmd = [sys.executable, "-m", "timeline.cli", "record", "-q", "--raw-only", "-o",
                           os.path.join(d, "r.tlraw"), "-e", "pystack", "--py-sample-hz", str(hz), "--",
                           args.python, target, str(args.seconds), str(args.threads)]
                    res[mode].append(one(cmd))
    finally:
        with open(STATS, "w") as f:
            f.write(old)
    pct = {m: [100 * (r["bpf"] + r["rec"]) / r["wall"] for r in rs] for m, rs in res.items()}
    print(f"{args.threads} spinning Python threads, {args.seconds:g} s, sampling {args.hz} Hz vs off, "
          f"{args.reps} runs each ({os.cpu_count()} CPUs)")
    for m, rs in res.items():
        print(f"  sampling {m:3}: BPF {statistics.median(r['bpf'] / r['wall'] * 100 for r in rs):6.3f} % "
              f"(tl_py_sample {statistics.median(r['sample'] / r['wall'] * 100 for r in rs):6.3f} %), "
              f"recorder {statistics.median(r['rec'] / r['wall'] * 100 for r in rs):6.3f} %  of one core "
              f"(runs: {', '.join(f'{x:.3f}' for x in pct[m])} %)")
    print(f"  sampling adds {statistics.median(pct['on']) - statistics.median(pct['off']):6.3f} % of one core "
          "(all programs: tl_py_switch and the others run on every switch of the machine, whose count varies "
          "from run to run)")
    own = (statistics.median(r["sample"] / r["wall"] * 100 for r in res["on"])
           + statistics.median(r["rec"] / r["wall"] * 100 for r in res["on"])
           - statistics.median(r["rec"] / r["wall"] * 100 for r in res["off"]))
    print(f"  sampling's own: tl_py_sample + the recorder's difference = {own:6.3f} % of one core")


if __name__ == "__main__":
    main()
