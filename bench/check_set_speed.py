"""bench/check_speed.py's recording (the issue-23 "302 MB trace": 10 M sched events + 3 M CUDA calls
at --steps 2000000 --cuda-steps 1000000) converted the way `timeline record` converts it by default
-- above trace_set.AUTO_SPLIT_ABOVE raw records, a trace set -- then every check on it.

    python bench/check_set_speed.py [--steps 2000000] [--cuda-steps 1000000] [--chunk-events N]

check_speed.py appends its CUDA calls to the converted trace; here they are the cuda family's ring
records in the raw log (two launches and a stream sync per CUDA step on the main thread, the same
times and lengths), so the converter sees them. --chunk-events: split by events instead of the
default (to split a small run). Prints the conversion (wall, CPU, peak RSS), the index, and
`timeline check SET` with every check, one worker: wall and CPU (children included), how many checks
came from the index, were "not recorded" by it, or loaded chunks, and events/s per core.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, ".."))

import check_speed  # noqa: E402
from rawlog_factory import BOOT0, end_block, header  # noqa: E402
from timeline import events as ev  # noqa: E402
from timeline.cuda import records as C  # noqa: E402
from timeline.cuda.probes import BY_NAME, table_meta  # noqa: E402
from timeline.rawlog import RawLogWriter  # noqa: E402
from timeline.sched_records import RING_SCHED, SCHED_EVENT, SCHED_SWITCH, SCHED_WAKING  # noqa: E402
from timeline.sched_records import SF_NEXT_TRACKED, SF_PREV_TRACKED  # noqa: E402

MAIN, WORKERS, STEP_NS = check_speed.MAIN, check_speed.WORKERS, check_speed.STEP_NS
BLOCK = 65536
WINDOW = 100_000  # steps written at a time, sched and CUDA blocks interleaved as the recorder's are


def cpu() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def _sched(i: np.ndarray) -> np.ndarray:
    """check_speed.sched_log's five events per step i."""
    t = BOOT0 + 1000 + i * STEP_NS
    wk = np.asarray(WORKERS, dtype=np.int64)[i % 2]
    cpu_w = 1 + i % 2
    run = 300_000 + (i * 7919) % 100_000
    a = np.zeros(i.size * 5, SCHED_EVENT)
    cols = [(t, 0, SCHED_SWITCH, MAIN, 0, 1, SF_PREV_TRACKED),
            (t + 10_000, cpu_w, SCHED_SWITCH, 0, wk, 0, SF_NEXT_TRACKED),
            (t + run - 20_000, cpu_w, SCHED_WAKING, wk, MAIN, 0, 0),
            (t + run - 10_000, cpu_w, SCHED_SWITCH, wk, 0, 1, SF_PREV_TRACKED),
            (t + run, 0, SCHED_SWITCH, 0, MAIN, 0, SF_NEXT_TRACKED)]
    for k, (ts, c, kind, tid, target, arg, flags) in enumerate(cols):
        sl = slice(k, a.size, 5)
        a["ts"][sl], a["cpu"][sl], a["kind"][sl] = ts, c, kind
        a["tid"][sl], a["target_tid"][sl], a["arg"][sl], a["flags"][sl] = tid, target, arg, flags
    a["prio"] = 120
    return a[np.argsort(a["ts"], kind="stable")]


def _cuda(i: np.ndarray) -> np.ndarray:
    """check_speed.cuda_packets' two launches and a sync per CUDA step i, as cuda call records."""
    t = BOOT0 + 1000 + i * STEP_NS + 30_000
    c = np.zeros((i.size, 3), C.CUDA_EVENT)
    launch, sync = BY_NAME["cudaLaunchKernel"].cookie(), BY_NAME["cudaStreamSynchronize"].cookie()
    for k, (cookie, off, dur) in enumerate(((launch, 0, 6_000 + (i % 5) * 1000), (launch, 20_000, 6_000),
                                            (sync, 40_000, 200_000))):
        c[:, k]["cookie"], c[:, k]["ts"], c[:, k]["dur"] = cookie, t + off, dur
    c = c.reshape(-1)
    c["tid"], c["tgid"], c["kind"], c["flags"] = MAIN, MAIN, C.CUDA_CALL, C.CF_HAS_RET
    return c


def build(path: str, steps: int, cuda_steps: int) -> tuple[int, int]:
    hdr = header(ncpu=4, target_pid=MAIN)
    hdr["cuda"] = {"probes": table_meta(), "mode": "full"}
    w = RawLogWriter(path, hdr)
    w.write_meta({"type": "procs", "ts": BOOT0, "processes": [
        {"pid": MAIN, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
         "threads": [{"tid": MAIN, "comm": "python3"}]},
        *({"pid": p, "ppid": MAIN, "comm": "pt_data_worker", "cmdline": ["python3", "train.py"],
           "threads": [{"tid": p, "comm": "pt_data_worker"}]} for p in WORKERS)]})
    n_sched = n_cuda = 0
    for s0 in range(0, steps, WINDOW):
        i = np.arange(s0, min(steps, s0 + WINDOW), dtype=np.int64)
        a = _sched(i)
        for s in range(0, a.size, BLOCK):
            w.write_ring(RING_SCHED, ev.encode_ring_bytes(a[s:s + BLOCK]))
        n_sched += a.size
        i = i[i < cuda_steps]
        if i.size:
            c = _cuda(i)
            for s in range(0, c.size, BLOCK):
                w.write_ring(C.RING_CUDA, ev.encode_ring_bytes(c[s:s + BLOCK]))
            n_cuda += c.size
    w.finish(end_block(drops_sched=[0] * 4, drops_proc=[0] * 4, stop_ts=int(BOOT0 + 1000 + steps * STEP_NS)))
    w.close()
    return n_sched, n_cuda


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2_000_000, help="training steps (5 sched events each)")
    ap.add_argument("--cuda-steps", type=int, default=1_000_000, help="steps with CUDA calls (3 each)")
    ap.add_argument("--chunk-events", type=int, default=0, help="split by this many events (default: as record does)")
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()

    from timeline.checks.traceset import FROM_INDEX, check_set
    from timeline.converters import convert
    from timeline.converters.trace_set import AUTO, SplitSpec
    from timeline.identity import invoking_user
    from timeline.trace_processor import TraceProcessorConfig

    with tempfile.TemporaryDirectory() as d:
        raw = os.path.join(d, "bench.tlraw")
        t0 = time.perf_counter()
        n_sched, n_cuda = build(raw, a.steps, a.cuda_steps)
        print(f"log: {n_sched:,} sched events + {n_cuda:,} CUDA calls, {os.path.getsize(raw) / 1e6:.0f} MB "
              f"(built in {time.perf_counter() - t0:.1f} s)")
        split = SplitSpec(events=a.chunk_events) if a.chunk_events else AUTO
        t, c = time.perf_counter(), cpu()
        res = convert(raw, os.path.join(d, "bench.pftrace"), split=split)
        wall, spent = time.perf_counter() - t, cpu() - c
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        path = res.out_path
        if not os.path.isdir(path):
            print(f"converted into one trace ({os.path.getsize(path) / 1e6:.0f} MB): not a set; use --chunk-events")
            return
        with open(os.path.join(path, "index.json")) as f:
            index = json.load(f)
        chunks = index["chunks"]
        events = sum(ch["events"] for ch in chunks)
        size = sum(ch["bytes"] for ch in chunks)
        print(f"convert: {wall:.1f} s wall, {spent:.1f} s CPU, peak RSS {rss:.0f} MiB; {len(chunks)} chunks, "
              f"{events:,} events, {size / 1e6:.0f} MB; index {os.path.getsize(os.path.join(path, 'index.json')):,} "
              f"bytes; partials: {', '.join(sorted(index.get('partials', {}))) or 'none'}")
        t, c = time.perf_counter(), cpu()
        rep = check_set(path, TraceProcessorConfig(engine="wasm"), invoking_user(), workers=a.workers)
        wall, spent = time.perf_counter() - t, cpu() - c
        def how(r) -> str:
            if r.note == FROM_INDEX:
                return "from the index"
            if r.status == "not recorded":
                return "not recorded"
            return "through the chunks"
        kinds: dict[str, int] = {}
        for r in rep.results:
            kinds[how(r)] = kinds.get(how(r), 0) + 1
        print(f"check SET, {len(rep.results)} checks: {wall:.2f} s wall, {spent:.2f} s CPU, "
              f"{events / max(spent, 1e-9) / 1e6:.2f} M events/s per core; "
              + ", ".join(f"{k} {v}" for k, v in kinds.items())
              + f"; engine {rep.engine or 'none (no chunk loaded)'}")
        for r in rep.results:
            print(f"  {r.check.id:16} {r.status:13} {how(r)}")

if __name__ == "__main__":
    main()
