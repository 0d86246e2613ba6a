"""Converter throughput and trace size on a 10M-event raw log (issue 6, workload 4/5).

    sudo python bench/convert_speed.py [--events 10000000] [--raw existing.tlraw] [--keep DIR]

The log is real data: a context-switch storm (bench/sched_storm.py) recorded
with timeline (needs root), or --raw; its RING blocks are then repeated with
timestamps shifted by the recording's span until the log holds --events
records.  Prints events/s and bytes/event for the Perfetto and Chrome JSON
converters, bytes per context switch in the protobuf, and how long the wasm
trace_processor takes to load the result and run a query.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from timeline import events as ev
from timeline.converters import convert
from timeline.rawlog import KIND_END, KIND_META, KIND_RING, RawLogReader, RawLogWriter

HERE = os.path.dirname(os.path.abspath(__file__))


def record_storm(path: str, seconds: float) -> None:
    cmd = [sys.executable, "-m", "timeline.cli", "record", "-q", "--raw-only", "-o", path, "--",
           sys.executable, os.path.join(HERE, "sched_storm.py"), str(seconds)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def replicate(src: str, dst: str, target: int) -> tuple[int, int]:
    """Copy src's blocks, then its RING blocks again and again, shifted in time."""
    rings, metas, end = [], [], None
    with RawLogReader(src) as rd:
        header = rd.header
        for blk in rd.blocks():
            if blk.kind == KIND_RING:
                dtype = ev.RING_STRUCTS[blk.ring][1]
                rings.append((blk.ring, ev.decode_ring_bytes(blk.payload, dtype)))
            elif blk.kind == KIND_META:
                metas.append(blk.json())
            elif blk.kind == KIND_END:
                end = blk.json()
    sched = [(r, a) for r, a in rings if r == ev.RING_SCHED]
    t0 = min(int(a["ts"].min()) for _, a in sched)
    t1 = max(int(a["ts"].max()) for _, a in sched)
    span = t1 - t0 + 1000
    hdr = {k: v for k, v in header.items() if k != "type"}
    w = RawLogWriter(dst, hdr)
    n = switches = rep = 0
    try:
        for m in metas:
            w.write_meta(m)
        for r, a in rings:  # first copy: everything, proc records included
            w.write_ring(r, ev.encode_ring_bytes(a))
            n += a.size
            switches += int((a["kind"] == ev.SCHED_SWITCH).sum()) if r == ev.RING_SCHED else 0
        while n < target:
            rep += 1
            for _, a in sched:
                b = a.copy()
                b["ts"] += rep * span
                if n + b.size > target:
                    b = b[: target - n]
                w.write_ring(ev.RING_SCHED, ev.encode_ring_bytes(b))
                n += b.size
                switches += int((b["kind"] == ev.SCHED_SWITCH).sum())
                if n >= target:
                    break
        if end is not None:
            end = dict(end, stop_ts=int(end.get("stop_ts", t1)) + rep * span)
            w.finish({k: v for k, v in end.items() if k != "type"})
    finally:
        w.close()
    return n, switches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--raw", help="use this raw log as the seed instead of recording a storm")
    ap.add_argument("--keep", help="directory to keep the generated files in")
    ap.add_argument("--no-tp", action="store_true", help="skip the trace_processor load")
    args = ap.parse_args()
    d = args.keep or tempfile.mkdtemp(prefix="tl-bench-")
    os.makedirs(d, exist_ok=True)
    seed = args.raw or os.path.join(d, "seed.tlraw")
    if not args.raw:
        print("recording a 2 s context-switch storm as seed ...", flush=True)
        record_storm(seed, 2.0)
    big = os.path.join(d, "big.tlraw")
    n, switches = replicate(seed, big, args.events)
    raw_size = os.path.getsize(big)
    print(f"raw log: {n:,} events ({switches:,} switches), {raw_size / n:.1f} bytes/event")
    results = {}
    for fmt, name in (("perfetto", "big.pftrace"), ("chrome", "big.json.gz"), ("chrome", "big.json")):
        out = os.path.join(d, name)
        t = time.perf_counter()
        res = convert(big, out, fmt=fmt)
        dt = time.perf_counter() - t
        size = os.path.getsize(out)
        results[name] = (dt, size)
        print(f"{name:12s} {dt:6.2f} s  {res.events / dt / 1e6:5.2f} M events/s  {size / 1e6:8.1f} MB  "
              f"{size / n:6.2f} bytes/event")
        if res.switch_bytes:
            print(f"{'':12s} compact sched: {res.switch_bytes / res.switches:.2f} bytes/switch "
                  f"({res.switches:,} switches)")
    pf = os.path.join(d, "big.pftrace")
    if not args.no_tp:
        from timeline.trace_processor import open_trace

        t = time.perf_counter()
        with open_trace(pf, engine="wasm") as tp:
            load = time.perf_counter() - t
            t = time.perf_counter()
            (rows,) = tp.query("select count(*) from sched").rows[0]
            q = time.perf_counter() - t
        print(f"trace_processor (wasm): load {load:.1f} s, count(*) from sched = {rows:,} in {q:.2f} s")
    if not args.keep:
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)


if __name__ == "__main__":
    main()
