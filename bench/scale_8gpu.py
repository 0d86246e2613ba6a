"""A synthetic recording of an 8-GPU node at training rates, converted (auto split) and checked.

    python bench/scale_8gpu.py [--minutes 1] [--workers 1,2] [--keep DIR]
    python bench/scale_8gpu.py --minutes 0.25,0.5,1      # several sizes: the linear fit

The raw log is written with the real writer (timeline.rawlog.RawLogWriter) and the families' real
record dtypes, the way the recorder lays it out: 8 ranks (processes), each launching 10k kernels/s
from its main thread (per launch: the cuda family's cudaLaunchKernel record, CUPTI's API record and
the kernel on GPU = rank, stream 7; every 10th a cudaMemcpyAsync and a copy instead), a training step
every 100 launches (an NVTX range `train_step`; the main thread then sleeps 0.5 ms until one of its
4 DataLoader worker processes, round robin, wakes it: 5 sched events per step), 48 CPUs.  The
recording is generated in 0.1 s windows (memory bounded), records in blocks of <= 4096 as one
drain stores them.  A full hour is 288 M launches (~865 M raw records, ~110 GB of raw log):
measure minutes and extrapolate only where several sizes show the cost is linear.

Then, each in a child process of its own: `convert --split auto` (a set of ~4 M-event chunks
above 10 M records), and `timeline check` of the set (checks/traceset.check_set) with each
--workers count.  Per step: wall and CPU time, peak RSS of every process (psutil sampling of the
process tree every 0.1 s; the step's own VmHWM; RUSAGE_CHILDREN for its pool workers), events/s
per core.  With two or more --minutes the costs per minute are fitted and extrapolated to one
hour, and the check pool's measured 1 -> 2 worker speedup to a 16-core host.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

from rawlog_factory import BOOT0, end_block, header  # noqa: E402
from timeline import events as ev  # noqa: E402
from timeline import sched_records as S  # noqa: E402
from timeline.cuda import records as C  # noqa: E402
from timeline.cuda.probes import BY_NAME, table_meta  # noqa: E402
from timeline.gpu import records as R  # noqa: E402
from timeline.rawlog import RawLogWriter  # noqa: E402

RANKS, WORKERS, NCPU = 8, 4, 48
LAUNCH_NS = 95_000           # 100 launches in 9.5 ms, then 0.5 ms waiting for the next batch
PER_STEP = 100
STEP_NS = 10_000_000         # so 10k launches/s per rank
WINDOW_STEPS = 10            # generated 0.1 s at a time
BLOCK = 4096
KERNELS = 50                 # distinct kernel names per rank


def pid_of(rank: int) -> int:
    return 10_000 + 100 * rank


def _procs_meta() -> dict:
    procs = []
    for r in range(RANKS):
        pid = pid_of(r)
        procs.append({"pid": pid, "ppid": 1, "comm": "python3",
                      "cmdline": ["python3", "train.py", f"--local-rank={r}"],
                      "threads": [{"tid": pid, "comm": "python3"}, {"tid": pid + 50, "comm": "pt_autograd_0"}]})
        procs += [{"pid": pid + 1 + w, "ppid": pid, "comm": "pt_data_worker", "cmdline": ["python3", "train.py"],
                   "threads": [{"tid": pid + 1 + w, "comm": "pt_data_worker"}]} for w in range(WORKERS)]
    return {"type": "procs", "ts": BOOT0, "processes": procs}


def _window(step0: int, steps: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cuda call records, gpu records sorted by start, sched events sorted by ts) of `steps` steps
    from step0, every rank."""
    n = steps * PER_STEP
    j = np.arange(n, dtype=np.int64)
    step = step0 + j // PER_STEP
    base = BOOT0 + 1_000_000 + step * STEP_NS + (j % PER_STEP) * LAUNCH_NS
    calls, gpu, sched = [], [], []
    launch, memcpy = BY_NAME["cudaLaunchKernel"], BY_NAME["cudaMemcpyAsync"]
    for r in range(RANKS):
        pid = pid_of(r)
        t = base + r * 1_337 + rng.integers(0, 2_000, n)          # ranks not in lockstep
        copy = ((step0 * PER_STEP + j) % 10) == 9
        corr = (step0 * PER_STEP + j + 1).astype(np.uint32)
        c = np.zeros(n, C.CUDA_EVENT)
        c["cookie"] = np.where(copy, memcpy.cookie(), launch.cookie())
        c["ts"], c["dur"], c["tid"], c["tgid"] = t, 4_000, pid, pid
        c["kind"], c["flags"] = C.CUDA_CALL, C.CF_HAS_RET
        c["args"][:, 2] = np.where(copy, 1 << 20, 0)
        c["args"][:, 3] = np.where(copy, 1, 0)
        calls.append(c)
        api = np.zeros(n, R.GPU_RECORD)
        api["kind"], api["start"], api["end"], api["pid"], api["tid"] = R.API, t + 500, t + 3_500, pid, pid
        api["correlation"], api["domain"] = corr, np.where(copy, 41, 211)
        work = np.zeros(n, R.GPU_RECORD)
        work["kind"] = np.where(copy, R.MEMCPY, R.KERNEL)
        work["start"] = t + 5_000
        work["end"] = t + 5_000 + rng.integers(10_000, 85_000, n)  # one stream: never overlaps the next
        work["pid"], work["correlation"], work["device"], work["stream"] = pid, corr, r, 7
        work["name"] = 1 + (j % KERNELS)
        work["grid"], work["block"] = (128, 1, 1), (256, 1, 1)
        work["registers"], work["static_smem"] = 32, 1024
        work["bytes"], work["copy_kind"] = np.where(copy, 1 << 20, 0), np.where(copy, 1, 0)
        s0 = BOOT0 + 1_000_000 + (step0 + np.arange(steps, dtype=np.int64)) * STEP_NS + r * 1_337
        nv = np.zeros(steps, R.GPU_RECORD)
        nv["kind"], nv["start"], nv["end"] = R.NVTX, s0, s0 + STEP_NS - 600_000
        nv["pid"], nv["tid"], nv["name"] = pid, pid, 100
        gpu += [api, work, nv] if NVTX else [api, work]
        sched.append(_sched(r, s0, step0))
    g = np.concatenate(gpu)
    s = np.concatenate(sched)
    return np.concatenate(calls), g[np.argsort(g["start"], kind="stable")], s[np.argsort(s["ts"], kind="stable")]


def _sched(rank: int, s0: np.ndarray, step0: int) -> np.ndarray:
    """Per step: main sleeps (S) after its launches, worker (step % 4) runs, wakes it and sleeps."""
    pid, steps = pid_of(rank), s0.size
    k = (step0 + np.arange(steps)) % WORKERS
    wk = pid + 1 + k
    cpu_m, cpu_w = rank, RANKS + WORKERS * rank + k
    sleep = s0 + PER_STEP * LAUNCH_NS + 2_000
    wake = s0 + STEP_NS - 20_000
    a = np.zeros(steps * 5, S.SCHED_EVENT)
    cols = [(sleep, cpu_m, S.SCHED_SWITCH, pid, 0, 1, S.SF_PREV_TRACKED),
            (sleep - 300_000, cpu_w, S.SCHED_SWITCH, 0, wk, 0, S.SF_NEXT_TRACKED),
            (wake - 10_000, cpu_w, S.SCHED_WAKING, wk, pid, cpu_m, 0),
            (wake - 5_000, cpu_w, S.SCHED_SWITCH, wk, 0, 1, S.SF_PREV_TRACKED),
            (wake, cpu_m, S.SCHED_SWITCH, 0, pid, 0, S.SF_NEXT_TRACKED)]
    for i, (ts, cpu, kind, tid, target, arg, flags) in enumerate(cols):
        sl = slice(i, None, 5)
        a["ts"][sl], a["cpu"][sl], a["kind"][sl] = ts, cpu, kind
        a["tid"][sl], a["target_tid"][sl], a["arg"][sl], a["flags"][sl] = tid, target, arg, flags
    a["prio"] = 120
    return a


NVTX = True  # the per-step NVTX ranges (bench/check_partials.py --no-nvtx turns them off)


def build(path: str, minutes: float, progress=None) -> dict:
    """Write the log; returns its counts."""
    steps = max(WINDOW_STEPS, int(round(minutes * 60e9 / STEP_NS)))
    hdr = header(ncpu=NCPU, target_pid=pid_of(0), command=("torchrun", "--nproc-per-node=8", "train.py"))
    hdr["cuda"] = {"probes": table_meta(), "mode": "full"}
    w = RawLogWriter(path, hdr)
    rng = np.random.default_rng(8)
    counts = {"launches": 0, "cuda": 0, "gpu": 0, "sched": 0}
    try:
        w.write_meta(_procs_meta())
        for r in range(RANKS):
            strings = {str(i): f"_Z{len(f'kernel{i}')}kernel{i}Pfi" for i in range(1, KERNELS + 1)}
            strings["100"] = "train_step"
            w.write_meta({"type": "gpu_strings", "pid": pid_of(r), "strings": strings})
        for s0 in range(0, steps, WINDOW_STEPS):
            calls, gpu, sched = _window(s0, min(WINDOW_STEPS, steps - s0), rng)
            for i in range(0, sched.size, BLOCK):
                w.write_ring(S.RING_SCHED, ev.encode_ring_bytes(sched[i:i + BLOCK]))
            for i in range(0, calls.size, BLOCK):
                w.write_ring(C.RING_CUDA, ev.encode_ring_bytes(calls[i:i + BLOCK]))
            for i in range(0, gpu.size, BLOCK):
                w.write_ring(R.RING_GPU, ev.encode_ring_bytes(gpu[i:i + BLOCK]))
            counts["launches"] += calls.size
            counts["cuda"] += calls.size
            counts["gpu"] += gpu.size
            counts["sched"] += sched.size
            if progress:
                progress(s0 + WINDOW_STEPS, steps)
        stop = BOOT0 + 1_000_000 + steps * STEP_NS + 10**6
        w.finish(end_block(drops_sched=[0] * NCPU, drops_proc=[0] * NCPU, stop_ts=int(stop)))
    finally:
        w.close()
    counts["records"] = counts["cuda"] + counts["gpu"] + counts["sched"]
    return counts


# -- steps in child processes, sampled -------------------------------------------------------------

CONVERT = """
import json, resource, sys, time
from timeline.converters import convert
from timeline.converters.trace_set import AUTO, SplitSpec
t, c = time.perf_counter(), time.process_time()
res = convert(sys.argv[1], sys.argv[2], split=SplitSpec(events=int(sys.argv[3])) if int(sys.argv[3]) else AUTO)
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
print(json.dumps({"s": time.perf_counter() - t, "cpu": time.process_time() - c, "hwm": hwm << 10,
                  "events": res.events, "out": res.out_path, "bytes": res.out_bytes,
                  "chunks": len(res.chunks or [0])}))
"""

CHECK = """
import json, resource, sys, time
from timeline.checks.traceset import check_set, read_index
from timeline.identity import invoking_user
from timeline.trace_processor import TraceProcessorConfig
from timeline.checks.traceset import is_trace_set
from timeline.checks.fleet import run_fleet
from timeline.checks import CATALOG
user = invoking_user()
skip = set(filter(None, sys.argv[4].split(",")))
ids = [c.id for c in CATALOG if c.id not in skip]
t, c = time.perf_counter(), time.process_time()
if is_trace_set(sys.argv[1]):
    chunks = read_index(sys.argv[1], user)
    rep = check_set(sys.argv[1], TraceProcessorConfig(), user, ids, workers=int(sys.argv[2]))
    incomplete, statuses = rep.incomplete, {r.check.id: r.status for r in rep.results}
else:  # below the auto split: one trace, one worker
    chunks = [{"events": int(sys.argv[3])}]
    one = run_fleet([sys.argv[1]], TraceProcessorConfig(), user, ids, None, workers=1)[0]
    incomplete, statuses = one.get("error"), {c["id"]: c["status"] for c in one.get("checks", [])}
s, cpu = time.perf_counter() - t, time.process_time() - c
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
print(json.dumps({"s": s, "cpu": cpu + kids.ru_utime + kids.ru_stime, "hwm": hwm << 10,
                  "children_maxrss": kids.ru_maxrss << 10, "events": sum(c.get("events", 0) for c in chunks),
                  "chunks": len(chunks), "incomplete": incomplete, "statuses": statuses}))
"""


def sampled(argv: list[str]) -> dict:
    """Run argv; its JSON last line, plus the peak RSS of each process of its tree (psutil, 0.1 s)."""
    import psutil

    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    peak: dict[int, tuple[str, int]] = {}
    done = threading.Event()

    def sample():
        try:
            top = psutil.Process(p.pid)
        except psutil.Error:
            return
        while not done.is_set():
            try:
                procs = [top] + top.children(recursive=True)
            except psutil.Error:
                procs = []
            for q in procs:
                try:
                    rss = q.memory_info().rss
                except psutil.Error:
                    continue
                role = "main" if q.pid == p.pid else "worker"
                if rss > peak.get(q.pid, ("", 0))[1]:
                    peak[q.pid] = (role, rss)
            done.wait(0.1)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = p.communicate()
    done.set()
    th.join()
    if p.returncode:
        sys.exit(f"{argv[2][:40]!r}... failed:\n{err[-3000:]}")
    res = json.loads(out.strip().splitlines()[-1])
    res["sampled"] = sorted(peak.values(), key=lambda x: (x[0] != "main", -x[1]))
    return res


def gb(n: float) -> str:
    return f"{n / 2**30:.2f} GB"


def rss_line(r: dict) -> str:
    workers = [rss for role, rss in r["sampled"] if role == "worker"]
    main = max([rss for role, rss in r["sampled"] if role == "main"] + [r["hwm"]])
    s = f"peak RSS main {gb(main)}"
    if workers or r.get("children_maxrss"):
        s += f", workers {', '.join(gb(x) for x in workers) or '-'} (RUSAGE_CHILDREN max {gb(r['children_maxrss'])})"
    return s


def one_size(d: str, minutes: float, workers: list[int], chunk_events: int, skip: str) -> dict:
    raw = os.path.join(d, f"node-{minutes:g}m.tlraw")
    t = time.perf_counter()
    counts = build(raw, minutes)
    gen = time.perf_counter() - t
    size = os.path.getsize(raw)
    print(f"\n== {minutes:g} min: {counts['launches']:,} launches, {counts['records']:,} raw records "
          f"({counts['gpu']:,} gpu, {counts['cuda']:,} cuda, {counts['sched']:,} sched), {size / 1e9:.2f} GB raw; "
          f"generated in {gen:.1f} s", flush=True)
    conv = sampled([sys.executable, "-c", CONVERT, raw, os.path.join(d, f"node-{minutes:g}m.pftrace"),
                    str(chunk_events)])
    os.unlink(raw)
    print(f"convert   {conv['s']:7.1f} s wall, {conv['cpu']:7.1f} s CPU, {conv['chunks']} chunk(s), "
          f"{conv['bytes'] / 1e9:.2f} GB; {conv['events'] / conv['cpu'] / 1e6:.2f} M raw records/s per core; "
          f"{rss_line(conv)}", flush=True)
    out = {"minutes": minutes, "counts": counts, "raw_bytes": size, "gen_s": gen, "convert": conv, "check": {}}
    target = conv["out"]
    for n in workers:
        chk = sampled([sys.executable, "-c", CHECK, target, str(n), str(conv["events"]), skip])
        out["check"][n] = chk
        bad = {k: v for k, v in chk["statuses"].items() if v == "failed"}
        print(f"check x{n}  {chk['s']:7.1f} s wall, {chk['cpu']:7.1f} s CPU, {chk['events']:,} trace events: "
              f"{chk['events'] / chk['s'] / 1e6:.2f} M events/s, {chk['events'] / chk['cpu'] / 1e6:.2f} M events/s "
              f"per core; {rss_line(chk)}" + (f"; FAILED {bad}" if bad else "")
              + (f"; incomplete: {chk['incomplete'][:200]}" if chk["incomplete"] else ""), flush=True)
    shutil.rmtree(target, ignore_errors=True) if os.path.isdir(target) else os.unlink(target)
    return out


def fit(results: list[dict], key) -> tuple[float, float, float]:
    """Least squares y = a + b * minutes; (a, b, worst relative residual)."""
    x = np.array([r["minutes"] for r in results], float)
    y = np.array([key(r) for r in results], float)
    b, a = np.polyfit(x, y, 1)
    return a, b, float(np.max(np.abs(a + b * x - y) / y))


def extrapolate(results: list[dict], workers: list[int]) -> None:
    print("\n== linear fits (y = a + b * minutes), worst residual; extrapolated to 60 min")
    rows = [("convert wall s", lambda r: r["convert"]["s"]), ("convert CPU s", lambda r: r["convert"]["cpu"]),
            ("convert peak RSS GB", lambda r: r["convert"]["hwm"] / 2**30)]
    rows += [(f"check x{n} wall s", lambda r, n=n: r["check"][n]["s"]) for n in workers]
    rows += [(f"check x{n} CPU s", lambda r, n=n: r["check"][n]["cpu"]) for n in workers]
    for name, key in rows:
        a, b, res = fit(results, key)
        print(f"{name:22s} a={a:8.2f} b={b:8.2f}/min  residual {100 * res:4.1f}%   60 min: {a + 60 * b:10.1f}")
    if 1 in workers and 2 in workers:
        big = results[-1]
        s1, s2 = big["check"][1]["s"], big["check"][2]["s"]
        eff = s1 / s2 / 2
        _, cpu_per_min, _ = fit(results, lambda r: r["check"][1]["cpu"])
        hour_cpu = 60 * cpu_per_min
        print(f"check pool: 1 -> 2 workers speedup {s1 / s2:.2f}x (efficiency {100 * eff:.0f}% per worker) "
              f"at {big['minutes']:g} min")
        for cores in (16,):
            ideal = hour_cpu / cores
            print(f"1 h on {cores} cores: {hour_cpu:,.0f} CPU s of checking -> {ideal:,.0f} s at perfect scaling, "
                  f"{ideal / max(eff, 1e-9):,.0f} s at the measured per-worker efficiency "
                  f"(goal: 600 s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", default="1", help="recorded minutes; several (0.25,0.5,1) fit a line")
    ap.add_argument("--workers", default="1,2", help="check pool sizes to measure ('': convert only)")
    ap.add_argument("--chunk-events", type=int, default=0,
                    help="split into chunks of this many events (default: --split auto, sets above 10 M records)")
    ap.add_argument("--skip", default="",
                    help="checks not to run, comma-separated (default: none; gpu_breakdown and host_gpu_gaps "
                         "grew quadratically before 2026-11-26 and were skipped: docs/benchmarks.md)")
    ap.add_argument("--keep", help="work directory (default: a temporary one, removed)")
    a = ap.parse_args()
    sizes = [float(x) for x in a.minutes.split(",")]
    workers = [int(x) for x in a.workers.split(",") if x]
    t0 = time.time()
    d = a.keep or tempfile.mkdtemp(prefix="tl-scale8-")
    os.makedirs(d, exist_ok=True)
    if a.skip:
        print(f"checks skipped: {a.skip}")
    print(f"{RANKS} ranks x {1e9 / STEP_NS * PER_STEP:,.0f} launches/s, {WORKERS} DataLoader workers each, "
          f"{os.cpu_count()} CPUs here, load {os.getloadavg()[0]:.1f}")
    try:
        results = [one_size(d, m, workers, a.chunk_events, a.skip) for m in sizes]
    finally:
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
    if len(results) >= 2:
        extrapolate(results, workers)
    print(f"({time.time() - t0:.0f} s, load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
