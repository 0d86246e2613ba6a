"""What "idle is idle" costs: extra sched records and trace bytes per switch.

    sudo python bench/idle_records.py [--workload demo|storm] [--baseline REV]

Records the workload (examples/train_cpu.py, 30 steps, or bench/sched_storm.py
for 2 s) with the working tree's recorder, then counts the switch records:
the recorded ones (a tracked task on either side), those to the idle task,
and the TL_SF_LEFT_IDLE ones (an idle CPU starting an untracked task, at most
one per recorded switch to idle).  "Before" is the same raw log without the
LEFT_IDLE records, converted by the `timeline` package of git revision REV
(default: main, which wrote idle and untracked tasks as one "other" thread per
CPU); "after" is the whole log converted by the working tree.  Prints records
per switch, raw bytes per switch and compact-sched bytes per switch for both.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from timeline import events as ev  # noqa: E402
from timeline import sched_records  # noqa: E402
from timeline.rawlog import KIND_END, KIND_META, KIND_RING, RawLogReader, RawLogWriter  # noqa: E402

WORKLOADS = {"demo": [os.path.join(REPO, "examples", "train_cpu.py"), "--steps", "30"],
             "storm": [os.path.join(HERE, "sched_storm.py"), "2"]}
CONVERT = """
import json, sys
from timeline.converters import convert
r = convert(sys.argv[1], sys.argv[2])
print(json.dumps({"switches": r.switches, "switch_bytes": r.switch_bytes, "out_bytes": r.out_bytes}))
"""


def without_left_idle(raw: str, out: str) -> None:
    """raw rewritten without its TL_SF_LEFT_IDLE switch records (what the old recorder wrote)."""
    with RawLogReader(raw) as rd:
        w = RawLogWriter(out, rd.header)
        for blk in rd.blocks():
            if blk.kind == KIND_META:
                w.write_meta(blk.json())
            elif blk.kind == KIND_RING:
                payload = blk.payload
                if blk.ring == sched_records.RING_SCHED:
                    recs = ev.decode_ring_bytes(payload, sched_records.SCHED_EVENT)
                    keep = recs[(recs["flags"] & sched_records.SF_LEFT_IDLE) == 0]
                    payload = ev.encode_ring_bytes(keep)
                w.write_ring(blk.ring, payload)
            elif blk.kind == KIND_END:
                w.finish(blk.json())
        w.close()


def convert_with(tree: str, raw: str, out: str) -> dict:
    cp = subprocess.run([sys.executable, "-c", CONVERT, raw, out], cwd=tree, capture_output=True, text=True,
                        env=dict(os.environ, PYTHONPATH=tree), check=True)
    return json.loads(cp.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="demo")
    ap.add_argument("--baseline", default="main", help="git revision of the converter before (default main)")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="tl-idle-")
    raw = os.path.join(d, "run.tlraw")
    subprocess.run([sys.executable, "-m", "timeline.cli", "record", "--raw-only", "-e", "sched", "-o", raw, "--",
                    sys.executable, *WORKLOADS[args.workload]], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    with RawLogReader(raw) as rd:
        recs = np.concatenate([ev.decode_ring_bytes(b.payload, sched_records.SCHED_EVENT) for b in rd.blocks()
                               if b.kind == KIND_RING and b.ring == sched_records.RING_SCHED])
    sw = recs[recs["kind"] == sched_records.SCHED_SWITCH]
    f = sw["flags"]
    left_idle = int(((f & sched_records.SF_LEFT_IDLE) != 0).sum())
    recorded = sw.size - left_idle
    to_idle = int((((f & sched_records.SF_PREV_TRACKED) != 0) & (sw["target_tid"] == 0)).sum())
    old = os.path.join(d, "baseline")
    os.makedirs(old)
    arch = subprocess.run(["git", "archive", args.baseline, "timeline"], cwd=REPO, check=True,
                          capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", old], input=arch, check=True)
    before_raw = os.path.join(d, "before.tlraw")
    without_left_idle(raw, before_raw)
    before = convert_with(old, before_raw, os.path.join(d, "before.pftrace"))
    after = convert_with(REPO, raw, os.path.join(d, "after.pftrace"))
    rec_size = sched_records.SCHED_EVENT.itemsize
    print(f"workload {args.workload}: {recorded:,} recorded switches, {to_idle:,} of them to idle, "
          f"{left_idle:,} LEFT_IDLE records added ({left_idle / max(recorded, 1):.2%} more switch records; "
          f"{left_idle / max(to_idle, 1):.1%} of switches to idle are followed by one)")
    print(f"{'':>8} {'records/switch':>15} {'raw B/switch':>13} {'trace switches':>15} "
          f"{'compact B/switch':>17} {'trace bytes':>12}")
    for name, n_rec, res in (("before", recorded, before), ("after", sw.size, after)):
        print(f"{name:>8} {n_rec / recorded:>15.4f} {n_rec * rec_size / recorded:>13.2f} {res['switches']:>15,} "
              f"{res['switch_bytes'] / max(res['switches'], 1):>17.2f} {res['out_bytes']:>12,}")
    print(f"(logs and traces kept in {d})")


if __name__ == "__main__":
    main()
