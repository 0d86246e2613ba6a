"""Converter throughput and trace size on a 10M-event raw log (issue 6, workload 4/5).

    sudo python bench/convert_speed.py [--events 10000000] [--raw existing.tlraw] [--keep DIR]
    sudo python bench/convert_speed.py --cuda [--cuda-calls 1000000] [--baseline REV] [--repeat 3]

The log is real data: a context-switch storm (bench/sched_storm.py) recorded
with timeline (needs root), or --raw; its RING blocks are then repeated with
timestamps shifted by the recording's span until the log holds --events
records.  Prints events/s and bytes/event for the Perfetto and Chrome JSON
converters, bytes per context switch in the protobuf, and how long the wasm
trace_processor takes to load the result and run a query.

--cuda measures the CUDA family instead: the seed is examples/cuda_calls.py
(NVIDIA's real libcudart, no GPU) recorded with `-e cuda` (or --raw), its
call records repeated, shifted in time, in blocks of --cuda-block records
(one recorder drain), up to --cuda-calls calls.  Each conversion runs in its
own process; with --baseline REV the `timeline` package of that git revision
is converted the same way, alternating with the working tree's, and the
ratio of the medians is printed (same machine, same minute); --compare then
loads both traces in trace_processor and counts calls (name, ts, dur, thread,
args), counter values and flows that differ.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from timeline import events as ev  # noqa: E402
from timeline import registry, sched_records  # noqa: E402
from timeline.converters import convert  # noqa: E402
from timeline.cuda import records as cuda_records  # noqa: E402
from timeline.rawlog import KIND_END, KIND_META, KIND_RING, RawLogReader, RawLogWriter  # noqa: E402

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
                dtype = registry.RING_DTYPES[blk.ring]
                rings.append((blk.ring, ev.decode_ring_bytes(blk.payload, dtype)))
            elif blk.kind == KIND_META:
                metas.append(blk.json())
            elif blk.kind == KIND_END:
                end = blk.json()
    sched = [(r, a) for r, a in rings if r == sched_records.RING_SCHED]
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
            switches += int((a["kind"] == sched_records.SCHED_SWITCH).sum()) if r == sched_records.RING_SCHED else 0
        while n < target:
            rep += 1
            for _, a in sched:
                b = a.copy()
                b["ts"] += rep * span
                if n + b.size > target:
                    b = b[: target - n]
                w.write_ring(sched_records.RING_SCHED, ev.encode_ring_bytes(b))
                n += b.size
                switches += int((b["kind"] == sched_records.SCHED_SWITCH).sum())
                if n >= target:
                    break
        if end is not None:
            end = dict(end, stop_ts=int(end.get("stop_ts", t1)) + rep * span)
            w.finish({k: v for k, v in end.items() if k != "type"})
    finally:
        w.close()
    return n, switches


# ------------------------------------------------------------------ CUDA calls

def record_cuda(path: str) -> None:
    cmd = [sys.executable, "-m", "timeline.cli", "record", "-q", "--raw-only", "-e", "cuda", "-o", path, "--",
           sys.executable, os.path.join(HERE, "..", "examples", "cuda_calls.py")]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=os.path.join(HERE, ".."))


def replicate_cuda(src: str, dst: str, target: int, block: int) -> int:
    """src as is, then its CUDA call records again and again (shifted by their
    span) in blocks of `block` records, until the log holds `target` calls."""
    calls = []
    with RawLogReader(src) as rd:
        header = rd.header
        blocks = list(rd.blocks())
    w = RawLogWriter(dst, {k: v for k, v in header.items() if k != "type"})
    n = 0
    end = None
    try:
        for blk in blocks:
            if blk.kind == KIND_RING:
                w.write_ring(blk.ring, bytes(blk.payload))
                if blk.ring == cuda_records.RING_CUDA:
                    a = ev.decode_ring_bytes(blk.payload, cuda_records.CUDA_EVENT)
                    calls.append(a[a["kind"] != cuda_records.CUDA_NAME])
            elif blk.kind == KIND_META:
                w.write_meta(blk.json())
            elif blk.kind == KIND_END:
                end = blk.json()
        seed = np.concatenate(calls)
        seed = seed[np.argsort(seed["ts"], kind="stable")]
        n = seed.size
        span = int((seed["ts"] + seed["dur"]).max() - seed["ts"].min()) + 1000
        reps = -(-max(target - n, 0) // seed.size)
        for s in range(0, reps * seed.size, block):
            idx = np.arange(s, min(s + block, reps * seed.size, target - n + s))
            b = seed[idx % seed.size]
            b["ts"] += (idx // seed.size + 1).astype(np.uint64) * np.uint64(span)
            w.write_ring(cuda_records.RING_CUDA, ev.encode_ring_bytes(b))
            n += b.size
            if n >= target:
                break
        if end is not None:
            end = dict(end, stop_ts=int(end.get("stop_ts", 0)) + (reps + 1) * span)
            w.finish({k: v for k, v in end.items() if k != "type"})
    finally:
        w.close()
    return n


_CONVERT = """
import importlib, json, sys, time
sys.path.insert(0, sys.argv[1])
from timeline.converters import convert, families
for spec in families.REGISTRY:  # imports (pyelftools...) are not conversion time
    importlib.import_module(spec.split(":")[0])
t, cpu = time.perf_counter(), time.process_time()
convert(sys.argv[2], sys.argv[3], fmt=sys.argv[4])
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM")]  # ru_maxrss counts the parent's too
print(json.dumps({"s": time.perf_counter() - t, "cpu": time.process_time() - cpu,
                  "rss_mb": int(hwm[0].split()[1]) / 1024}))
"""


def convert_in(tree: str, raw: str, out: str, fmt: str) -> dict:
    """Convert with the `timeline` package found in `tree`, in a fresh process."""
    cp = subprocess.run([sys.executable, "-c", _CONVERT, tree, raw, out, fmt], cwd=tree, capture_output=True,
                        text=True)
    if cp.returncode:
        sys.exit(f"conversion with {tree} failed:\n{cp.stderr}")
    return json.loads(cp.stdout.strip().splitlines()[-1])


_CALLS_SQL = """
select s.ts, s.dur, s.name, s.category, t.tid, p.pid,
       (select group_concat(key || '=' || coalesce(int_value, string_value, real_value), ' ')
        from (select * from args a where a.arg_set_id = s.arg_set_id and a.key glob '*.*' order by key)) as args
from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid) left join process p using (upid)
where s.category in ('cuda', 'cuda_driver', 'nccl') order by s.ts, t.tid, s.name
"""
_COUNTERS_SQL = """
select t.name, p.pid, c.ts, c.value from counter c join process_counter_track t on c.track_id = t.id
join process p using (upid) order by t.name, p.pid, c.ts
"""
_FLOWS_SQL = """
select so.ts, so.name, si.ts, si.name from flow f join slice so on so.id = f.slice_out
join slice si on si.id = f.slice_in order by so.ts, si.ts
"""


def trace_facts(path: str) -> list:
    """What a converted trace says about the CUDA calls (debug./args. prefixes dropped)."""
    from timeline.trace_processor import open_trace

    with open_trace(path) as tp:
        calls = [r[:6] + (r[6].replace("debug.", "").replace("args.", "") if r[6] else "",)
                 for r in tp.query(_CALLS_SQL).rows]
        return [calls, tp.query(_COUNTERS_SQL).rows, tp.query(_FLOWS_SQL).rows]


def cuda_main(args, d: str) -> None:
    seed = args.raw or os.path.join(d, "cuda_seed.tlraw")
    if not args.raw:
        print("recording examples/cuda_calls.py (-e cuda) as seed ...", flush=True)
        record_cuda(seed)
    big = os.path.join(d, "cuda.tlraw")
    calls = replicate_cuda(seed, big, args.cuda_calls, args.cuda_block)
    print(f"raw log: {calls:,} CUDA calls in blocks of {args.cuda_block}, "
          f"{os.path.getsize(big) / calls:.1f} bytes/call")
    trees = {"new": os.path.abspath(os.path.join(HERE, ".."))}
    if args.baseline:
        old = os.path.join(d, "baseline")
        os.makedirs(old)
        arch = subprocess.run(["git", "archive", args.baseline, "timeline"], cwd=trees["new"], check=True,
                              capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", old], input=arch, check=True)
        trees = {"old": old, **trees}
    for fmt, ext in (("perfetto", "pftrace"), ("chrome", "json")):
        times: dict[str, list] = {k: [] for k in trees}
        cpus: dict[str, list] = {k: [] for k in trees}
        sizes, rss = {}, {}
        for rep in range(args.repeat):  # alternate the trees: drift hits both alike
            for k, tree in trees.items():
                out = os.path.join(d, f"cuda-{k}.{ext}")
                r = convert_in(tree, big, out, fmt)
                times[k].append(r["s"])
                cpus[k].append(r["cpu"])
                rss[k] = max(rss.get(k, 0), r["rss_mb"])
                sizes[k] = os.path.getsize(out)
                if not (args.compare and rep == args.repeat - 1):
                    os.unlink(out)
        for k in trees:  # CPU time: less disturbed by other work on the machine than wall time
            med, cpu = statistics.median(times[k]), statistics.median(cpus[k])
            print(f"{fmt:8s} {k:4s} wall {med:6.2f} s ({calls / med / 1e3:5.0f}k calls/s), "
                  f"CPU {cpu:6.2f} s ({calls / cpu / 1e3:5.0f}k calls/s), median of "
                  f"{len(times[k])};  {sizes[k] / calls:5.1f} bytes/call, peak RSS {rss[k]:.0f} MB")
        if "old" in trees:
            ratio = statistics.median(times["old"]) / statistics.median(times["new"])
            cratio = statistics.median(cpus["old"]) / statistics.median(cpus["new"])
            print(f"{fmt:8s} new/old speed: {ratio:.2f}x wall, {cratio:.2f}x CPU; size ratio "
                  f"{sizes['new'] / sizes['old']:.3f}")
            if args.compare:  # same trace, as trace_processor reads it?
                old, new = (os.path.join(d, f"cuda-{k}.{ext}") for k in ("old", "new"))
                facts = [trace_facts(p) for p in (old, new)]
                for what, a, b in zip(("calls", "counter values", "flows"), *facts):
                    diff = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
                    print(f"{fmt:8s} {what}: {len(a):,} old, {len(b):,} new, {diff} differ")
                for p in (old, new):
                    os.unlink(p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--raw", help="use this raw log as the seed instead of recording a storm")
    ap.add_argument("--keep", help="directory to keep the generated files in")
    ap.add_argument("--no-tp", action="store_true", help="skip the trace_processor load")
    ap.add_argument("--cuda", action="store_true", help="measure CUDA call slices instead of sched events")
    ap.add_argument("--cuda-calls", type=int, default=1_000_000)
    ap.add_argument("--cuda-block", type=int, default=4096, help="CUDA records per raw block")
    ap.add_argument("--baseline", help="git revision whose converter to compare with (--cuda)")
    ap.add_argument("--repeat", type=int, default=3, help="conversions per tree and format (--cuda)")
    ap.add_argument("--compare", action="store_true",
                    help="with --baseline: check in trace_processor that both traces say the same (--cuda)")
    args = ap.parse_args()
    d = args.keep or tempfile.mkdtemp(prefix="tl-bench-")
    os.makedirs(d, exist_ok=True)
    if args.cuda:
        try:
            cuda_main(args, d)
        finally:
            if not args.keep:
                subprocess.run(["rm", "-rf", d], check=False)
        return
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
