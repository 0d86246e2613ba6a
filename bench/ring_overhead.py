"""Ring mode (--ring) against normal recording, in one run (issue 15).

    sudo python bench/ring_overhead.py [--reps 5] [--steps 150] [--ring 1m]

The workload is bench/overhead.py's: examples/train_cpu.py (CNN, DataLoader
with 2 workers), whose own median step time is the measurement.  Untraced,
normal recording (default families) and the same with --ring run in a
rotating order `reps` times each.  Printed: median step time and slowdown
of each, the ring/normal step-time ratio, and raw-log bytes per minute of
recording (normal: the .tlraw's size; ring: all bytes written to segments,
from the recorder's summary) with the most the ring's segments held on disk.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import json

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import ENV, command  # noqa: E402


def run(cmd: list[str]) -> tuple[float, float, str]:
    cp = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=900)
    line = next((ln for ln in cp.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if cp.returncode != 0 or line is None:
        raise SystemExit(f"run failed ({cp.returncode}): {' '.join(cmd)}\n{cp.stderr[-2000:]}")
    data = json.loads(line[6:])
    return statistics.median(data["step_s"]), data["wall_s"], cp.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--ring", default="1m")
    args = ap.parse_args()
    data = os.path.join(tempfile.gettempdir(), "timeline-bench-data")
    step: dict[str, list[float]] = {"untraced": [], "normal": [], "ring": []}
    per_min: dict[str, list[float]] = {"normal": [], "ring": []}
    ring_disk: list[int] = []
    with tempfile.TemporaryDirectory(prefix="tl-ring-") as out:
        subprocess.run(command("untraced", "cnn", 5, 0, data, out), env=ENV, capture_output=True)  # make data
        order = list(step)
        for rep in range(args.reps):
            k = rep % len(order)
            for cfg in order[k:] + order[:k]:
                cmd = command("untraced" if cfg == "untraced" else "default", "cnn", args.steps, args.warmup,
                              data, out)
                if cfg != "untraced":
                    cmd.remove("-q")
                    cmd[cmd.index("--"):cmd.index("--")] = ["--keep-raw"] + (["--ring", args.ring] if cfg == "ring"
                                                                             else [])
                s, wall, err = run(cmd)
                step[cfg].append(s)
                if cfg == "normal":
                    per_min[cfg].append(os.path.getsize(os.path.join(out, "t.tlraw")) / wall * 60)
                elif cfg == "ring":
                    m = re.search(r"segments took at most ([\d,]+) bytes on disk \(([\d,]+) written", err)
                    ring_disk.append(int(m.group(1).replace(",", "")))
                    per_min[cfg].append(int(m.group(2).replace(",", "")) / wall * 60)
                print(f"  rep {rep + 1}/{args.reps} {cfg:9s} step {s * 1e3:7.2f} ms", file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in step.items()}
    for k, v in med.items():
        print(f"{k:9s} step {v * 1e3:7.2f} ms  slowdown {(v / med['untraced'] - 1) * 100:+5.1f}%  "
              f"spread {(max(step[k]) - min(step[k])) / v * 100:4.1f}%")
    print(f"ring/normal step-time ratio: {med['ring'] / med['normal']:.3f}")
    for k, v in per_min.items():
        print(f"raw log {k}: {statistics.median(v) / 2**20:.1f} MiB per minute")
    print(f"ring --ring {args.ring}: segments held at most {max(ring_disk) / 2**20:.1f} MiB on disk")


if __name__ == "__main__":
    main()
