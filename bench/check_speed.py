"""Time every `timeline check` on a ~1M-event trace.

    python bench/check_speed.py [--steps 200000] [--cuda-steps 100000] [--engine wasm|native]

Builds a synthetic raw log the way the recorder lays it out (tests/
rawlog_factory.py's header and writer): a training loop whose main thread
sleeps each step until one of two DataLoader worker processes wakes it, five
sched events per step (1M for the default 200k steps, 4 CPUs), converts it to
.pftrace, and appends CUDA calls on the main thread (two launches and a sync
per CUDA step; issue 5's contract) so the CUDA checks have data too. Then
loads it once and prints how long each check takes.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rawlog_factory import BOOT0, end_block, header  # noqa: E402
from timeline import events as ev  # noqa: E402
from timeline.rawlog import RawLogWriter  # noqa: E402
from timeline.sched_records import (RING_SCHED, SCHED_EVENT, SCHED_SWITCH, SCHED_WAKING,  # noqa: E402
                                    SF_NEXT_TRACKED, SF_PREV_TRACKED)

MAIN, WORKERS, STEP_NS = 1000, (1100, 1200), 500_000


def sched_log(path: str, steps: int) -> int:
    """Step i: the main thread sleeps on CPU 0 while worker i % 2 runs on CPU
    1 + i % 2, wakes it and sleeps; then the main thread runs again."""
    w = RawLogWriter(path, header(ncpu=4, target_pid=MAIN))
    w.write_meta({"type": "procs", "ts": BOOT0, "processes": [
        {"pid": MAIN, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
         "threads": [{"tid": MAIN, "comm": "python3"}]},
        *({"pid": p, "ppid": MAIN, "comm": "pt_data_worker", "cmdline": ["python3", "train.py"],
           "threads": [{"tid": p, "comm": "pt_data_worker"}]} for p in WORKERS)]})
    i = np.arange(steps, dtype=np.int64)
    t = BOOT0 + 1000 + i * STEP_NS
    wk = np.asarray(WORKERS, dtype=np.int64)[i % 2]
    cpu_w = 1 + i % 2
    n = steps * 5
    a = np.zeros(n, SCHED_EVENT)
    run = 300_000 + (i * 7919) % 100_000  # main thread's compute per step, ns
    # (ts, cpu, kind, tid, target_tid, arg, flags)
    cols = [
        (t, 0, SCHED_SWITCH, MAIN, 0, 1, SF_PREV_TRACKED),                       # main sleeps (S)
        (t + 10_000, cpu_w, SCHED_SWITCH, 0, wk, 0, SF_NEXT_TRACKED),            # worker runs
        (t + run - 20_000, cpu_w, SCHED_WAKING, wk, MAIN, 0, 0),                 # batch ready
        (t + run - 10_000, cpu_w, SCHED_SWITCH, wk, 0, 1, SF_PREV_TRACKED),      # worker sleeps
        (t + run, 0, SCHED_SWITCH, 0, MAIN, 0, SF_NEXT_TRACKED),                 # main runs
    ]
    for k, (ts, cpu, kind, tid, target, arg, flags) in enumerate(cols):
        sl = slice(k, n, 5)
        a["ts"][sl], a["cpu"][sl], a["kind"][sl] = ts, cpu, kind
        a["tid"][sl], a["target_tid"][sl], a["arg"][sl], a["flags"][sl] = tid, target, arg, flags
    a["prio"] = 120
    a = a[np.argsort(a["ts"], kind="stable")]
    for s in range(0, n, 65536):
        w.write_ring(RING_SCHED, ev.encode_ring_bytes(a[s:s + 65536]))
    w.finish(end_block(drops_sched=[0] * 4, drops_proc=[0] * 4, stop_ts=int(t[-1] + STEP_NS)))
    w.close()
    return n


def cuda_packets(steps: int) -> tuple[bytes, int]:
    """Two launches and a sync per step on the main thread's track."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    p = trace.packet.add(timestamp=BOOT0 + 1000, trusted_packet_sequence_id=77,
                         sequence_flags=pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED)
    p.track_descriptor.uuid = 1
    p.track_descriptor.thread.pid = p.track_descriptor.thread.tid = MAIN
    calls = 0
    for i in range(steps):
        t = BOOT0 + 1000 + i * STEP_NS + 30_000
        for name, off, dur in (("cudaLaunchKernel", 0, 6_000 + (i % 5) * 1000),
                               ("cudaLaunchKernel", 20_000, 6_000),
                               ("cudaStreamSynchronize", 40_000, 200_000)):
            b = trace.packet.add(timestamp=t + off, trusted_packet_sequence_id=77,
                                 sequence_flags=pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)
            b.track_event.type, b.track_event.track_uuid, b.track_event.name = 1, 1, name  # SLICE_BEGIN
            b.track_event.categories.append("cuda")
            b.track_event.debug_annotations.add(name="ret", int_value=0)
            e = trace.packet.add(timestamp=t + off + dur, trusted_packet_sequence_id=77,
                                 sequence_flags=pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)
            e.track_event.type, e.track_event.track_uuid = 2, 1  # SLICE_END
            calls += 1
    return trace.SerializeToString(), calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200_000, help="training steps (5 sched events each)")
    ap.add_argument("--cuda-steps", type=int, default=100_000, help="steps with CUDA calls (3 each)")
    ap.add_argument("--engine", default="wasm", choices=("wasm", "native", "auto"))
    ap.add_argument("--keep", help="also save the trace here")
    args = ap.parse_args()

    from timeline.checks import CATALOG, detect_families
    from timeline.checks.runner import prelude_sql, run_check
    from timeline.converters import convert
    from timeline.trace_processor import open_trace

    with tempfile.TemporaryDirectory() as d:
        raw, out = os.path.join(d, "bench.tlraw"), args.keep or os.path.join(d, "bench.pftrace")
        t0 = time.perf_counter()
        n = sched_log(raw, args.steps)
        convert(raw, out, fmt="perfetto")
        data, calls = cuda_packets(args.cuda_steps)
        with open(out, "ab") as f:
            f.write(data)
        print(f"trace: {n:,} sched events + {calls:,} CUDA calls, {os.path.getsize(out) / 1e6:.1f} MB "
              f"(built in {time.perf_counter() - t0:.1f} s)")

        t0 = time.perf_counter()
        tp = open_trace(out, engine=args.engine)
        print(f"{tp.engine_name} engine: load {time.perf_counter() - t0:.2f} s")
        t0 = time.perf_counter()
        families = detect_families(tp)
        tp.query(prelude_sql())  # templated (${window_cap}): the runner renders it
        print(f"families + shared prelude: {time.perf_counter() - t0:.2f} s")
        total = 0.0
        print(f"{'check':16} {'status':13} seconds")
        for c in CATALOG:
            r = run_check(tp, c, families, c.defaults())
            total += r.seconds
            print(f"{c.id:16} {r.status:13} {r.seconds:7.3f}")
        print(f"{'all checks':30} {total:7.3f}")
        tp.close()


if __name__ == "__main__":
    main()
