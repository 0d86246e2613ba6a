"""The gpu family checked on a real GPU against torch.profiler (issue 25), in one lease.

    python bench/gpu_truth.py run --out DIR --deadline EPOCH [--dry-run]   (root; bench/gpu_truth.sh)
    python bench/gpu_truth.py analyze DIR [--json FILE]                      (anywhere: trace_processor)

`run` records examples/train_cpu.py --device cuda (CNN, MLP) with every family, the same
workload under torch.profiler in a separate untraced run, torch.profiler inside a `-e gpu`
recording (coexistence), step-time overhead (untraced / gpu / all families, alternating),
NVIDIA's CUDA 12 libcudart + libcupti under `-e cuda,gpu`, and the 40-step sample trace.
Each phase is guarded (a failure is logged, the next phase runs) and packed into
DIR/<phase>.tar.gz as soon as it ends; DIR/log.txt and DIR/results.json grow as it goes, so
a lease cut short still returns what was done.  --dry-run does every phase on a machine
without a GPU: torch on the CPU, the gpu family through the stand-in CUDA driver/runtime/CUPTI
of tests/standins (built with cc).

`analyze` reads the unpacked tarballs and prints the tables of docs/gpu-validation.md.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
TRAIN = os.path.join(REPO, "examples", "train_cpu.py")
CU12 = os.path.join(HERE, "gpu_truth_cu12.py")
STANDINS = os.path.join(REPO, "tests", "standins")
ALL_FAMILIES = "sched,ioctl,block,counters,cuda,gpu,pystack,net,mem,cgroup"
MAX_TAR = 15 << 20  # the device tool returns files up to 16 MiB


class Run:
    """One lease: output folder, work folder, deadline, log and results written as they grow."""

    def __init__(self, args):
        self.out, self.dry, self.deadline = args.out, args.dry_run, args.deadline
        self.work = args.work
        os.makedirs(self.out, exist_ok=True)
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.results: dict = {"dry_run": self.dry, "phases": {}, "runs": []}
        self.data = os.path.join(self.work, "data")
        self.standins: dict = {}
        self.steps, self.warmup, self.ovh_steps = args.steps, args.warmup, args.ovh_steps

    # -- bookkeeping
    def log(self, msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')} left {self.left():5.0f}s] {msg}"
        print(line, flush=True)
        if os.environ.get("GT_LOG_TEED"):  # bench/gpu_truth.sh already copies stdout into log.txt
            return
        with open(os.path.join(self.out, "log.txt"), "a") as f:
            f.write(line + "\n")

    def save(self) -> None:
        tmp = os.path.join(self.out, ".results.tmp")
        with open(tmp, "w") as f:
            json.dump(self.results, f, indent=1, default=str)
        os.replace(tmp, os.path.join(self.out, "results.json"))

    def left(self) -> float:
        return self.deadline - time.time()

    def pack(self, phase: str, files: list[str]) -> None:
        """DIR/<phase>.tar.gz; files that would make it pass 15 MiB are left out (logged)."""
        files = [f for f in files if os.path.exists(f)]
        dest = os.path.join(self.out, f"{phase}.tar.gz")
        while True:
            with tarfile.open(dest, "w:gz", compresslevel=6) as t:
                for f in files:
                    t.add(f, arcname=os.path.join(phase, os.path.basename(f)))
            size = os.path.getsize(dest)
            if size <= MAX_TAR or not files:
                break
            biggest = max(files, key=os.path.getsize)
            self.log(f"{phase}.tar.gz is {size >> 20} MiB: leaving out {os.path.basename(biggest)}")
            files.remove(biggest)
        self.results["phases"].setdefault(phase, {})["tar"] = {"bytes": size,
                                                              "files": [os.path.basename(f) for f in files]}
        self.save()
        self.log(f"packed {dest} ({size / 1e6:.1f} MB, {len(files)} files)")

    # -- commands
    def python(self) -> list[str]:
        return [sys.executable]

    def train(self, model: str, steps: int, warmup: int, profile_out: str | None = None) -> tuple[list, dict]:
        argv = self.python() + [TRAIN, "--device", "cpu" if self.dry else "cuda", "--model", model,
                                "--steps", str(steps), "--warmup", str(warmup), "--json", "--workers", "2",
                                "--data", self.data]
        if profile_out:
            argv += ["--profiler", "torch", "--profile-out", profile_out]
        return argv, dict(os.environ)

    def gpu_target(self, model: str, steps: int, warmup: int, profile_out: str | None = None):
        """What the gpu family is recorded on: the real workload, or (dry run) the stand-in one."""
        if not self.dry:
            return self.train(model, steps, warmup, profile_out)
        env = dict(os.environ, PYTHONPATH=STANDINS)
        d = os.path.dirname(self.standins["libcudart.so.12"])
        return self.python() + [os.path.join(STANDINS, "gpu_steps.py"), d, str(steps + warmup), "12", "5"], env

    def cuda_lib_args(self) -> list[str]:
        if not self.dry:
            return []
        return [a for lib in ("libcuda.so.1", "libcudart.so.12") for a in ("--cuda-lib", self.standins[lib])]

    def execute(self, name: str, argv: list, env: dict, cap: float) -> dict | None:
        """Run argv; stdout/stderr into work/NAME.stdout/.stderr; parse BENCH/WINDOW lines."""
        timeout = min(cap, self.left() - 8)
        if timeout < 10:
            self.log(f"{name}: skipped, {self.left():.0f}s left")
            return None
        self.log(f"{name}: {' '.join(os.path.basename(a) if a.startswith(REPO) else a for a in argv)}")
        for k in ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "TIMELINE_GPU_SOCKET"):
            env.pop(k, None)
        t = time.perf_counter()
        so, se = (open(os.path.join(self.work, f"{name}.{x}"), "w") for x in ("stdout", "stderr"))
        try:
            cp = subprocess.run(argv, stdout=so, stderr=se, env=env, cwd=REPO, timeout=timeout)
            rc = cp.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        finally:
            so.close()
            se.close()
        wall = time.perf_counter() - t
        out = open(os.path.join(self.work, f"{name}.stdout")).read()
        err = open(os.path.join(self.work, f"{name}.stderr")).read()
        r: dict = {"name": name, "rc": rc, "wall_s": round(wall, 3)}
        m = re.search(r"^BENCH (.*)$", out, re.M)
        if m:
            steps = json.loads(m.group(1))["step_s"]
            r["step_s"] = steps
            r["median_step_ms"] = statistics.median(steps) * 1e3 if steps else None
        m = re.search(r"WINDOW boottime_ns (\d+) (\d+)", out)
        if m:
            r["window_boottime_ns"] = [int(m.group(1)), int(m.group(2))]
        r["gpu_summary"] = [ln.strip() for ln in err.splitlines() if "gpu" in ln.lower()][-30:]
        self.results["runs"].append(r)
        self.save()
        self.log(f"{name}: rc {rc}, {wall:.1f}s" + (f", median step {r['median_step_ms']:.2f} ms"
                                                    if r.get("median_step_ms") else "")
                 + "".join(f"\n    {ln}" for ln in r["gpu_summary"][-8:]))
        if rc != 0:
            self.log(f"{name}: stderr tail:\n" + err[-1500:])
        return r

    def record(self, name: str, families: str, target: tuple, cap: float, keep_raw=False,
               extra: tuple = ()) -> dict | None:
        argv, env = target
        trace = os.path.join(self.work, f"{name}.pftrace")
        opts = (["--keep-raw"] if keep_raw else []) + list(extra)
        r = self.execute(name, self.python() + ["-m", "timeline.cli", "record", "-e", families, *opts,
                                                *self.cuda_lib_args(), "-o", trace, "--", *argv], env, cap)
        if r is not None and keep_raw:
            raw = trace[:-len(".pftrace")] + ".tlraw"
            if os.path.exists(raw):
                try:
                    r["raw_stats"] = raw_stats(raw, r.get("window_boottime_ns"))
                    self.log(f"{name}: raw {json.dumps(r['raw_stats'])[:1500]}")
                except Exception as e:  # noqa: BLE001 - a bench: report and go on
                    self.log(f"{name}: raw stats failed: {e!r}")
                os.remove(raw)  # too big to carry back; its numbers are in results.json
            self.save()
        return r

    def files(self, *names: str) -> list[str]:
        out = []
        for n in names:
            out += sorted(glob.glob(os.path.join(self.work, n)))
        return out

    def gzip(self, path: str) -> str:
        if not os.path.exists(path):
            return path
        with open(path, "rb") as f, gzip.open(path + ".gz", "wb", 6) as g:
            shutil.copyfileobj(f, g)
        os.remove(path)
        return path + ".gz"


def raw_stats(raw: str, window) -> dict:
    """From the raw log, what the trace does not show directly: CUPTI API records' thread ids
    against the uprobe (cuda ring) tids, runtime/driver records sharing a correlation id, GPU
    times against the workload's CLOCK_BOOTTIME window, HELLO/STATUS."""
    import numpy as np

    from timeline import events, registry
    from timeline.gpu import records
    from timeline.rawlog import KIND_META, KIND_RING, RawLogReader

    parts: dict = {}
    metas = []
    with RawLogReader(raw) as r:
        for blk in r.blocks():
            if blk.kind == KIND_META:
                metas.append(blk.json())
            elif blk.kind == KIND_RING:
                name = registry.RING_NAMES.get(blk.ring)
                if name in ("gpu", "cuda"):
                    parts.setdefault(name, []).append(events.decode_ring_bytes(blk.payload, registry.RING_DTYPES[blk.ring]))
    out: dict = {"hello": [m.get("info") for m in metas if m.get("type") == "gpu_hello"],
                 "status": [m.get("info", m) for m in metas if m.get("type") == "gpu_status"]}
    g = np.concatenate(parts["gpu"]) if parts.get("gpu") else np.zeros(0, records.GPU_RECORD)
    out["records"] = {records.KIND_NAMES.get(int(k), str(k)): int((g["kind"] == k).sum()) for k in np.unique(g["kind"])}
    api = g[g["kind"] == records.API]
    cuda = np.concatenate(parts["cuda"]) if parts.get("cuda") else None
    uprobe_tids = set(cuda["tid"].tolist()) if cuda is not None and "tid" in cuda.dtype.names else set()
    api_tids = set(api["tid"].tolist())
    out["api_tids"] = sorted(api_tids)[:20]
    out["uprobe_tids"] = sorted(uprobe_tids)[:20]
    out["api_records_on_uprobe_tid"] = float(np.isin(api["tid"], list(uprobe_tids)).mean()) if len(api) and uprobe_tids else None
    out["api_tid_looks_like_pthread_self"] = bool(len(api) and int(api["tid"].max()) > (1 << 22))
    drv = (api["flags"] & records.GF_DRIVER) != 0
    rt_c, drv_c = set(api["correlation"][~drv].tolist()), set(api["correlation"][drv].tolist())
    out["api_runtime"], out["api_driver"] = int((~drv).sum()), int(drv.sum())
    out["correlation_ids_shared_by_runtime_and_driver"] = len(rt_c & drv_c)
    work = g[np.isin(g["kind"], [records.KERNEL, records.MEMCPY, records.MEMSET])]
    if len(work):
        out["gpu_time_ns"] = [int(work["start"].min()), int(work["end"].max())]
        if window:
            lo, hi = window
            inside = (work["start"] >= lo - 120 * 10**9) & (work["end"] <= hi + 5 * 10**9)
            out["gpu_times_near_window"] = float(inside.mean())  # BOOTTIME callback took effect
        wc = set(work["correlation"].tolist())
        out["work_with_api_record"] = float(np.isin(work["correlation"], list(rt_c | drv_c)).mean())
        out["work_correlation_ids"] = len(wc)
    return out


def build_standins(run: Run) -> None:
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from standins import build_gpu

    run.standins = build_gpu(os.path.join(run.work, "standins"))
    run.log(f"stand-ins built: {sorted(run.standins)}")


def phase_models(run: Run, model: str, coexist: bool) -> None:
    steps, warm = run.steps, run.warmup
    run.record(f"{model}-all", ALL_FAMILIES, run.gpu_target(model, steps, warm), 150, keep_raw=True)
    prof = os.path.join(run.work, f"{model}-profiler.json")
    run.execute(f"{model}-profiler", *run.train(model, steps, warm, prof), 120)
    prof = run.gzip(prof)
    names = [f"{model}-all.*", f"{model}-profiler.*"]
    if coexist:
        cprof = os.path.join(run.work, f"{model}-coexist-profiler.json")
        argv, env = run.train(model, steps, warm, cprof)
        run.record(f"{model}-coexist", "gpu", (argv, env), 150, keep_raw=True)
        run.gzip(cprof)
        names.append(f"{model}-coexist*")
    run.pack(model, run.files(*names))


def step_table(run: Run, phase: str, model: str, per: dict) -> None:
    """Per configuration: its runs' median steps, their median and its ratio to the untraced one;
    into results.json under phases.PHASE.MODEL, and the log."""
    table = {c: {"median_step_ms_per_rep": v, "median_of_medians_ms": statistics.median(v) if v else None}
             for c, v in per.items()}
    base = table["untraced"]["median_of_medians_ms"]
    for c in table:
        m = table[c]["median_of_medians_ms"]
        table[c]["ratio_vs_untraced"] = m / base if m and base else None
    run.results["phases"].setdefault(phase, {})[model] = table
    run.save()
    run.log(f"{phase.replace('_', ' ')} {model}: " + ", ".join(
        f"{c} {t['median_of_medians_ms']} ms ({t['ratio_vs_untraced']})" for c, t in table.items()))


def phase_overhead(run: Run, model: str, reps: int) -> None:
    configs = [("untraced", None), ("gpu", "gpu"), ("all", ALL_FAMILIES)]
    steps, warm = max(run.ovh_steps, 60), run.warmup
    per: dict = {c: [] for c, _ in configs}
    for rep in range(reps):
        for cname, fam in configs:
            name = f"ovh-{model}-{cname}-{rep}"
            target = run.train(model, steps, warm)
            r = (run.execute(name, *target, 120) if fam is None else
                 run.record(name, fam, target, 150))
            if r and r.get("median_step_ms"):
                per[cname].append(r["median_step_ms"])
            for f in run.files(f"{name}.pftrace"):
                os.remove(f)  # only the numbers matter here
    step_table(run, "overhead", model, per)


# What each part of the gpu family costs the traced program (TIMELINE_GPU_OFF, activity.c),
# against no tracing and against torch.profiler, alternating, on one model.
CUPTI_SHARE = [("untraced", None, None), ("gpu", "gpu", ""), ("gpu-no-api", "gpu", "api"),
               ("gpu-no-timestamps", "gpu", "timestamps"), ("gpu-no-sync", "gpu", "sync"),
               ("gpu-kernels-only", "gpu", "api,timestamps,sync,memset,memcpy"), ("torch-profiler", None, "prof")]


def phase_cupti_share(run: Run, model: str, reps: int) -> None:
    steps, warm = max(run.steps, 60), run.warmup
    per: dict = {c: [] for c, _, _ in CUPTI_SHARE}
    for rep in range(reps):
        for cname, fam, off in CUPTI_SHARE:
            name = f"share-{model}-{cname}-{rep}"
            prof = os.path.join(run.work, f"{name}.json") if off == "prof" else None
            argv, env = run.train(model, steps, warm, prof)
            if fam:
                env["TIMELINE_GPU_OFF"] = off
            r = run.execute(name, argv, env, 120) if fam is None else run.record(name, fam, (argv, env), 150)
            if r and r.get("median_step_ms"):
                per[cname].append(r["median_step_ms"])
            for f in run.files(f"{name}.pftrace", f"{name}.json"):
                os.remove(f)
    step_table(run, "cupti_share", model, per)


# The same, in one process: it launches untraced all along and the recorder attaches with
# --pid for a few seconds per configuration (not gpu: CUPTI only loads at process start).
LAUNCH_AB = [("cuda", "cuda", ()), ("cuda-entry-only", "cuda", ("--cuda-mode", "entry-only")),
             ("cuda+pystack", "cuda,pystack", ()),
             ("cuda+pystack-every-launch", "cuda,pystack", ("--py-launch-every", "1"))]


def _cuda_window(raw: str):
    """First and last cuda-ring event time in a raw log (when the probes were on)."""
    import numpy as np

    from timeline import events, registry
    from timeline.rawlog import KIND_RING, RawLogReader

    ts = []
    with RawLogReader(raw) as r:
        for blk in r.blocks():
            if blk.kind == KIND_RING and registry.RING_NAMES.get(blk.ring) == "cuda":
                ts.append(events.decode_ring_bytes(blk.payload, registry.RING_DTYPES[blk.ring])["ts"])
    t = np.concatenate(ts) if ts else np.zeros(0)
    return (int(t.min()), int(t.max())) if len(t) > 1000 else None


def phase_launch_ab(run: Run, reps: int) -> None:
    per_step, attach_s = 1000, 3
    seconds = reps * len(LAUNCH_AB) * 14 + 10
    out = os.path.join(run.work, "launch-ab.stdout")
    argv = run.python() + [LAUNCH_TARGET, "cpu" if run.dry else "cuda", "stream", str(seconds), str(per_step)]
    with open(out, "w") as f:
        target = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    windows = []
    try:
        t0 = time.monotonic()
        while "READY" not in open(out).read() and time.monotonic() - t0 < 60:
            time.sleep(0.2)
        for rep in range(reps):
            for cname, fam, extra in LAUNCH_AB:
                time.sleep(2)  # untraced batches between windows
                name = f"ab-{cname}-{rep}"
                r = run.execute(name, run.python() + ["-m", "timeline.cli", "record", "-e", fam, *extra,
                                                      *run.cuda_lib_args(), "--pid", str(target.pid),
                                                      "--duration", str(attach_s), "--keep-raw", "-o",
                                                      os.path.join(run.work, f"{name}.pftrace")], dict(os.environ), 60)
                raw = os.path.join(run.work, f"{name}.tlraw")
                w = _cuda_window(raw) if r and os.path.exists(raw) else None
                for f in run.files(f"{name}.tlraw", f"{name}.pftrace"):
                    os.remove(f)
                if w:
                    windows.append((cname, w))
                else:
                    run.log(f"{name}: no cuda events recorded")
    finally:
        target.kill()
        target.wait()
    batches = [(int(a), float(b)) for ln in open(out) if ln.startswith("B ")
               for _, a, b in [ln.split()]]
    # per window: median batch inside it against the untraced batches in the gap before it
    # (starting 0.5 s after the previous window ended); a batch's span is [end - dur, end]
    table: dict = {c: [] for c, *_ in LAUNCH_AB}
    prev_end = 0
    for cname, (lo, hi) in windows:
        inside = [d for e, d in batches if e - d * 1e9 >= lo and e <= hi]
        before = [d for e, d in batches if e - d * 1e9 >= prev_end + 5e8 and e < lo]
        prev_end = hi
        if len(inside) >= 20 and len(before) >= 20:
            table[cname].append((statistics.median(inside) - statistics.median(before)) * 1e6 / per_step)
    res = {c: {"added_us_per_launch_per_window": [round(v, 3) for v in vs],
               "median_added_us_per_launch": round(statistics.median(vs), 3) if vs else None}
           for c, vs in table.items()}
    res["untraced_us_per_launch"] = round(statistics.median([d for _, d in batches]) * 1e6 / per_step, 3) \
        if batches else None
    run.results["phases"].setdefault("launch_ab", {})["add_"] = res
    run.save()
    run.log(f"launch a/b (one process, µs added per launch, median of windows): {json.dumps(res)}")
    run.pack("launch-ab", [out])


def phase_cuda12(run: Run) -> None:
    if run.dry:
        cudart = run.standins["libcudart.so.12"]
    else:
        cudart = os.path.join(REPO, ".devcarry", "cu12", "nvidia", "cuda_runtime", "lib", "libcudart.so.12")
    run.results["phases"].setdefault("cuda12", {})["libcudart"] = cudart
    run.record("cuda12", "cuda,gpu", (run.python() + [CU12, cudart, "20"], dict(os.environ)), 90, keep_raw=True)
    if not run.dry:  # the bundled example too (made-up stream handles: may fail on a real driver)
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(cudart) + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
        run.record("cuda12-example", "cuda,gpu", (run.python() + [os.path.join(REPO, "examples", "cuda_calls.py")],
                                                  env), 40, keep_raw=True)
    run.pack("cuda12", run.files("cuda12*"))


def phase_sample(run: Run) -> None:
    argv, env = run.gpu_target("cnn", 40, 0)
    run.record("train_gpu", _default_families(), (argv, env), 120)
    run.pack("sample", run.files("train_gpu.*"))


NCCL_TARGET = os.path.join(HERE, "gpu_truth_nccl.py")
LAUNCH_TARGET = os.path.join(HERE, "gpu_truth_launch.py")
# What each part costs one kernel launch (issue 22: pystack's added cost per launch with the
# default 1-in-N policy and with every launch; the eBPF uprobes; CUPTI), alternating.
LAUNCH_COST = [("untraced", None, (), None), ("cuda", "cuda", (), None),
               ("cuda+pystack", "cuda,pystack", (), None),
               ("cuda+pystack-every-launch", "cuda,pystack", ("--py-launch-every", "1"), None),
               ("gpu-kernels-only", "gpu", (), "api,timestamps,sync,memset,memcpy"),
               ("gpu", "gpu", (), ""), ("cuda+gpu+pystack", "cuda,gpu,pystack", (), None)]


def phase_launch_cost(run: Run, reps: int) -> None:
    per_step = 1000
    # GT_LAUNCH_CONFIGS=a,b: only these; GT_LAUNCH_CPU=N: the target pinned to CPU N (processes
    # placed on different cores differed by ~2 µs a launch on the H100 host)
    only = [c for c in os.environ.get("GT_LAUNCH_CONFIGS", "").split(",") if c]
    configs = [c for c in LAUNCH_COST if not only or c[0] in only]
    pin = ["taskset", "-c", os.environ["GT_LAUNCH_CPU"]] if os.environ.get("GT_LAUNCH_CPU") else []
    per: dict = {c: [] for c, *_ in configs}
    for rep in range(reps):
        for cname, fam, extra, off in configs:
            name = f"launch-{cname}-{rep}"
            argv = pin + run.python() + [LAUNCH_TARGET, "cpu" if run.dry else "cuda", "60", str(per_step)]
            env = dict(os.environ)
            if off is not None:
                env["TIMELINE_GPU_OFF"] = off
            r = (run.execute(name, argv, env, 90) if fam is None else
                 run.record(name, fam, (argv, env), 120, extra=extra))
            if r and r.get("median_step_ms"):
                per[cname].append(r["median_step_ms"])
            for f in run.files(f"{name}.pftrace"):
                if rep or fam != "cuda":  # one kept: which calls a launch makes
                    os.remove(f)
    run.pack("launch-cost", run.files("launch-*-0.pftrace"))
    step_table(run, "launch_cost", "add_", per)
    t = run.results["phases"]["launch_cost"]["add_"]
    base = t["untraced"]["median_of_medians_ms"]
    for c, row in t.items():  # a step is per_step launches: ms per step = µs per launch
        m = row["median_of_medians_ms"]
        row["us_per_launch"] = m * 1e3 / per_step if m else None
        row["added_us_per_launch"] = (m - base) * 1e3 / per_step if m and base else None
    run.save()
    run.log("launch cost (µs per launch, added): " + ", ".join(
        f"{c} {r['us_per_launch']:.3f} (+{r['added_us_per_launch']:.3f})" for c, r in t.items()
        if r["us_per_launch"] is not None))


def phase_nccl(run: Run) -> None:
    """NCCL collectives on the one lent GPU (world size 1): ncclAllReduce's uprobe slices, their
    Python stacks and the NCCL kernels' flows on real NCCL (dry run: gloo on the CPU, no probes)."""
    argv = run.python() + [NCCL_TARGET, "gloo" if run.dry else "nccl", "40"]
    run.record("nccl", "sched,cuda,gpu,pystack", (argv, dict(os.environ)), 90)
    run.pack("nccl", run.files("nccl.*"))


def _default_families() -> str:
    from timeline import registry

    return ",".join(registry.DEFAULT_EVENTS)


def environment() -> dict:
    def sh(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"({e})"
    return {"kernel": platform.release(), "python": sys.version.split()[0],
            "gpu": sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]),
            "torch": sh([sys.executable, "-c", "import torch;print(torch.__version__, torch.version.cuda, "
                         "torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"]),
            "nproc": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def run_all(args) -> None:
    run = Run(args)
    run.log(f"gpu_truth run: dry_run={run.dry}, steps {run.steps}+{run.warmup} warm-up, out {run.out}")
    run.results["env"] = environment()
    run.save()
    run.log(f"env: {run.results['env']}")
    phases = []
    if run.dry:
        phases.append(("standins", lambda: build_standins(run)))
    phases += [("cnn", lambda: phase_models(run, "cnn", coexist=True)),
               ("mlp", lambda: phase_models(run, "mlp", coexist=False)),
               ("cuda12", lambda: phase_cuda12(run)),
               ("sample", lambda: phase_sample(run)),
               ("overhead-cnn", lambda: phase_overhead(run, "cnn", args.reps)),
               ("overhead-mlp", lambda: phase_overhead(run, "mlp", args.reps)),
               ("cupti-share-mlp", lambda: phase_cupti_share(run, "mlp", args.reps)),
               ("cupti-share-cnn", lambda: phase_cupti_share(run, "cnn", args.reps))]
    phases.append(("nccl", lambda: phase_nccl(run)))
    phases.append(("launch-cost", lambda: phase_launch_cost(run, args.reps)))
    phases.append(("launch-ab", lambda: phase_launch_ab(run, args.reps)))
    if args.phases:  # only these, in the order given (a short lease does what matters first)
        wanted = args.phases.split(",")
        byname = dict(phases)
        phases = [p for p in phases if p[0] == "standins"] + [(w, byname[w]) for w in wanted if w in byname]
    for name, fn in phases:
        if run.left() < 25:
            run.log(f"phase {name}: skipped (deadline)")
            continue
        t = time.perf_counter()
        run.log(f"== phase {name}")
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - one phase failing must not end the lease
            import traceback

            run.log(f"phase {name} failed: {e!r}\n{traceback.format_exc()[-2000:]}")
        run.results["phases"].setdefault(name, {})["wall_s"] = round(time.perf_counter() - t, 1)
        run.save()
    run.log("done")


# ---------------------------------------------------------------- analyze (here, on the fetched files)

def profiler_side(path: str, window_us=None) -> dict:
    """Kernels and copies from torch.profiler's Chrome JSON inside its 'timeline_window'."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    win = next((e for e in ev if e.get("name") == "timeline_window" and e.get("ph") == "X"), None)
    lo, hi = (win["ts"], win["ts"] + win["dur"]) if win else (float("-inf"), float("inf"))
    kernels: dict = {}
    copies: dict = {}
    for e in ev:
        if e.get("ph") != "X" or not (lo <= e.get("ts", lo - 1) <= hi):
            continue
        cat = e.get("cat")
        if cat == "kernel":
            kernels.setdefault(e["name"], []).append(float(e["dur"]) * 1e3)
        elif cat in ("gpu_memcpy", "gpu_memset"):
            kind = e["name"].split(" (")[0]
            c = copies.setdefault(f"{cat}:{kind}", [0, 0])
            c[0] += 1
            c[1] += int(e.get("args", {}).get("bytes", 0))
    return {"kernels": kernels, "copies": copies, "window": win is not None}


def timeline_side(trace: str, window_ns) -> dict:
    from timeline.trace_processor import open_trace

    lo, hi = window_ns if window_ns else (0, 2**63 - 1)
    out: dict = {}
    with open_trace(trace) as tp:
        q = lambda sql: tp.query(sql).as_dicts()  # noqa: E731
        kernels: dict = {}
        for r in q(f"select name, dur from slice where category = 'gpu_kernel' and ts >= {lo} and ts <= {hi}"):
            kernels.setdefault(r["name"], []).append(r["dur"])
        out["kernels"] = kernels
        copies: dict = {}
        for r in q(f"""select s.category as cat, s.name as name, count(*) as n,
                              sum(coalesce(extract_arg(s.arg_set_id, 'debug.bytes'), 0)) as b
                       from slice s where s.category in ('gpu_memcpy', 'gpu_memset') and ts >= {lo} and ts <= {hi}
                       group by 1, 2"""):
            copies[f"{r['cat']}:{r['name']}"] = [r["n"], r["b"]]
        out["copies"] = copies
        work = q("""select s.category as cat, count(*) as n, count(f.id) as with_flow from slice s
                    left join flow f on f.slice_in = s.id
                    where s.category in ('gpu_kernel', 'gpu_memcpy', 'gpu_memset') group by 1""")
        out["flows"] = {r["cat"]: {"n": r["n"], "with_flow": r["with_flow"]} for r in work}
        d = q("""select s.ts - c.ts as delay, c.name as call, extract_arg(c.arg_set_id, 'debug.source') as src,
                        extract_arg(c.arg_set_id, 'debug.py') as py, t.tid as tid, t.name as tname
                 from slice s join flow f on f.slice_in = s.id join slice c on c.id = f.slice_out
                 left join thread_track tt on c.track_id = tt.id left join thread t using (utid)
                 where s.category = 'gpu_kernel'""")
        delays = sorted(r["delay"] for r in d)
        out["launch_delay_ns"] = _dist(delays)
        out["launch_after_kernel_start"] = sum(1 for x in delays if x < 0)
        srcs: dict = {}
        for r in d:
            k = f"{'cupti-made' if r['src'] == 'cupti' else 'cuda family'} slice on {r['tname']}"
            srcs[k] = srcs.get(k, 0) + 1
        out["flow_sources"] = srcs
        calls: dict = {}
        for r in d:  # which call each kernel's flow starts at, and how many of those carry a py stack
            c = calls.setdefault(f"{r['call']} ({'cupti-made' if r['src'] == 'cupti' else 'probed'})",
                                 {"flows": 0, "with_py": 0, "py_examples": []})
            c["flows"] += 1
            if r["py"]:
                c["with_py"] += 1
                if r["py"] not in c["py_examples"] and len(c["py_examples"]) < 3:
                    c["py_examples"].append(r["py"][:200])
        out["flow_calls"] = calls
        out["nccl_calls"] = q("""select name, count(*) as n, count(extract_arg(arg_set_id, 'debug.py')) as with_py,
                                        max(extract_arg(arg_set_id, 'debug.py')) as py_example
                                 from slice where category = 'nccl' group by 1""")
        out["nccl_kernels"] = q("""select s.name as name, count(*) as n, count(f.id) as with_flow from slice s
                                   left join flow f on f.slice_in = s.id
                                   where s.category = 'gpu_kernel' and s.name like '%nccl%' group by 1""")
        out["nvtx"] = q("""select name, count(*) as n from slice where category = 'nvtx'
                           group by 1 order by 2 desc limit 8""")
        out["nvtx_total"] = q("select count(*) as n from slice where category = 'nvtx'")[0]["n"]
        out["gpu_tracks"] = [r["name"] for r in q("select distinct name from track where name like 'GPU %'")][:20]
    return out


def _dist(xs: list) -> dict:
    if not xs:
        return {"n": 0}
    pick = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
    return {"n": len(xs), "min": xs[0], "p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": xs[-1]}


def _med(v):
    return statistics.median(v) if v else None


def compare_model(d: str, model: str, results: dict, steps: int) -> dict:
    runs = {r["name"]: r for r in results.get("runs", [])}
    rec = runs.get(f"{model}-all", {})
    trace = os.path.join(d, model, f"{model}-all.pftrace")
    prof = next(iter(glob.glob(os.path.join(d, model, f"{model}-profiler.json*"))), None)
    ours = timeline_side(trace, rec.get("window_boottime_ns")) if os.path.exists(trace) else None
    theirs = profiler_side(prof) if prof else None
    out: dict = {"model": model, "steps": steps, "timeline": ours, "profiler_copies": theirs and theirs["copies"]}
    print(f"\n### {model}: {steps} steps in the window\n")
    if ours is None or theirs is None:
        print(f"missing: {'trace' if ours is None else ''} {'profiler JSON' if theirs is None else ''}")
        return out
    tot = lambda k: {n: sum(v) for n, v in k.items()}  # noqa: E731
    names = sorted(set(tot(ours["kernels"])) | set(tot(theirs["kernels"])),
                   key=lambda n: -max(sum(ours["kernels"].get(n, [])), sum(theirs["kernels"].get(n, []))))
    print(f"kernels per step: timeline {sum(map(len, ours['kernels'].values())) / steps:.2f}, "
          f"torch.profiler {sum(map(len, theirs['kernels'].values())) / steps:.2f}\n")
    print("| kernel (top 10 by total time) | per step tl | per step prof | median ns tl | median ns prof | diff |")
    print("|---|---|---|---|---|---|")
    rows = []
    for n in names[:10]:
        a, b = ours["kernels"].get(n, []), theirs["kernels"].get(n, [])
        ma, mb = _med(a), _med(b)
        diff = f"{(ma - mb) / mb * 100:+.1f}%" if ma and mb else "-"
        rows.append({"kernel": n, "tl_per_step": len(a) / steps, "prof_per_step": len(b) / steps,
                     "tl_median_ns": ma, "prof_median_ns": mb})
        print(f"| `{n[:70]}` | {len(a) / steps:.2f} | {len(b) / steps:.2f} | {ma or 0:.0f} | {mb or 0:.0f} | {diff} |")
    out["top_kernels"] = rows
    print("\n| copy/memset kind | count tl | count prof | bytes tl | bytes prof |\n|---|---|---|---|---|")
    for k in sorted(set(ours["copies"]) | set(theirs["copies"])):
        a, b = ours["copies"].get(k, [0, 0]), theirs["copies"].get(k, [0, 0])
        print(f"| {k} | {a[0]} | {b[0]} | {a[1]} | {b[1]} |")
    print("\n| GPU work | slices | with a launch flow | fraction |\n|---|---|---|---|")
    for cat, f in ours["flows"].items():
        print(f"| {cat} | {f['n']} | {f['with_flow']} | {f['with_flow'] / max(1, f['n']):.4f} |")
    ld = ours["launch_delay_ns"]
    print(f"\nlaunch→kernel start (ns): {ld}; kernels starting before their launch call: "
          f"{ours['launch_after_kernel_start']}")
    print(f"flow sources: {ours['flow_sources']}")
    print("\n| flow starts at | kernels | with a `py` stack | e.g. |\n|---|---|---|---|")
    for call, c in sorted(ours.get("flow_calls", {}).items(), key=lambda kv: -kv[1]["flows"]):
        print(f"| {call} | {c['flows']} | {c['with_py']} | {(c['py_examples'] or [''])[0][:90]} |")
    print(f"NVTX ranges: {ours['nvtx_total']}, e.g. {[(r['name'], r['n']) for r in ours['nvtx'][:4]]}")
    print(f"GPU tracks: {ours['gpu_tracks'][:6]}")
    rs = rec.get("raw_stats")
    if rs:
        print(f"raw log: records {rs.get('records')}; API tids on uprobe tids {rs.get('api_records_on_uprobe_tid')} "
              f"(pthread_self-like: {rs.get('api_tid_looks_like_pthread_self')}); runtime {rs.get('api_runtime')} / "
              f"driver {rs.get('api_driver')} API records, {rs.get('correlation_ids_shared_by_runtime_and_driver')} "
              f"correlation ids shared; GPU times near the BOOTTIME window: {rs.get('gpu_times_near_window')}; "
              f"work with an API record: {rs.get('work_with_api_record')}")
        for h in rs.get("hello", [])[-2:]:
            print(f"HELLO: {json.dumps(h)[:400]}")
        for s in rs.get("status", [])[-2:]:
            print(f"STATUS: {json.dumps(s)[:400]}")
    return out


def checks(trace: str) -> list:
    cp = subprocess.run([sys.executable, "-m", "timeline.cli", "check", "--format", "json", "--only",
                         "gpu_breakdown,gpu_queue_delay,kernel_outliers,comm_overlap,host_gpu_gaps", trace],
                        capture_output=True, text=True, cwd=REPO, timeout=600)
    try:
        return json.loads(cp.stdout)
    except ValueError:
        return [{"error": (cp.stderr or cp.stdout)[-800:]}]


def analyze(args) -> None:
    d = args.dir
    for t in glob.glob(os.path.join(d, "*.tar.gz")):
        with tarfile.open(t) as tf:
            tf.extractall(d, filter="data")
    with open(os.path.join(d, "results.json")) as f:
        results = json.load(f)
    steps = args.steps
    print(f"env: {results.get('env')}  (dry run: {results.get('dry_run')})")
    report: dict = {"env": results.get("env"), "models": {}, "checks": {}}
    for model in ("cnn", "mlp"):
        try:
            report["models"][model] = compare_model(d, model, results, steps)
        except Exception as e:  # noqa: BLE001
            print(f"{model}: analysis failed: {e!r}")
    runs = {r["name"]: r for r in results.get("runs", [])}
    print("\n### coexistence: torch.profiler inside a `-e gpu` recording\n")
    co = runs.get("cnn-coexist")
    cprof = next(iter(glob.glob(os.path.join(d, "cnn", "cnn-coexist-profiler.json*"))), None)
    if co:
        ctrace = os.path.join(d, "cnn", "cnn-coexist.pftrace")
        ck = timeline_side(ctrace, co.get("window_boottime_ns"))["kernels"] if os.path.exists(ctrace) else {}
        pk = profiler_side(cprof)["kernels"] if cprof else {}
        print(f"kernels in the window: timeline {sum(map(len, ck.values()))}, torch.profiler {sum(map(len, pk.values()))}")
        print("recorder's gpu lines:\n  " + "\n  ".join(co.get("gpu_summary", [])[-10:]))
        report["coexist"] = {"timeline_kernels": sum(map(len, ck.values())), "profiler_kernels": sum(map(len, pk.values())),
                             "gpu_summary": co.get("gpu_summary")}
    print("\n### NCCL on one GPU (world size 1)\n")
    ntrace = os.path.join(d, "nccl", "nccl.pftrace")
    if os.path.exists(ntrace):
        n = timeline_side(ntrace, runs.get("nccl", {}).get("window_boottime_ns"))
        print(f"NCCL calls: {n['nccl_calls']}\nNCCL kernels: {n['nccl_kernels']}\nflow calls: {n['flow_calls']}")
        report["nccl"] = {k: n[k] for k in ("nccl_calls", "nccl_kernels", "flow_calls")}
    else:
        print("no nccl trace")
    print("\n### overhead (median step time, ms; median over reps)\n")
    print("| model | untraced | -e gpu | all families | gpu / untraced | all / untraced |\n|---|---|---|---|---|---|")
    for model, t in results.get("phases", {}).get("overhead", {}).items():
        g = lambda c, k="median_of_medians_ms": t.get(c, {}).get(k)  # noqa: E731
        fmt = lambda x, p=3: "-" if x is None else f"{x:.{p}f}"  # noqa: E731
        print(f"| {model} | {fmt(g('untraced'))} | {fmt(g('gpu'))} | {fmt(g('all'))} | "
              f"{fmt(g('gpu', 'ratio_vs_untraced'))} | {fmt(g('all', 'ratio_vs_untraced'))} |")
    report["overhead"] = results.get("phases", {}).get("overhead", {})
    print("\n### CUDA 12 (NVIDIA's libcudart.so.12 + libcupti.so.12 carried)\n")
    for name in ("cuda12", "cuda12-example"):
        r = runs.get(name)
        if r:
            rs = r.get("raw_stats", {})
            print(f"{name}: rc {r['rc']}; records {rs.get('records')}; HELLO "
                  f"{[{k: h.get(k) for k in ('active', 'reason', 'cupti_path', 'cupti_version', 'record_layout')} for h in rs.get('hello', []) if h]}")
            report[name] = rs
    print("\n### GPU checks on the real traces\n")
    for t in sorted(glob.glob(os.path.join(d, "*", "*.pftrace"))):
        res = checks(t)
        report["checks"][os.path.basename(t)] = res
        print(f"{os.path.relpath(t, d)}:")
        for item in (res if isinstance(res, list) else res.get("results", res.get("checks", [res]))):
            brief = {k: v for k, v in item.items() if k not in ("why", "fix", "title", "families")} \
                if isinstance(item, dict) else item
            print("  " + json.dumps(brief, default=str)[:700])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
        print(f"\nwrote {args.json}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="record everything (root; a GPU unless --dry-run)")
    r.add_argument("--out", required=True)
    r.add_argument("--work", default="/tmp/gpu-truth-work")
    r.add_argument("--deadline", type=float, default=time.time() + 480, help="epoch seconds")
    r.add_argument("--dry-run", action="store_true")
    r.add_argument("--steps", type=int, default=60)
    r.add_argument("--warmup", type=int, default=20)
    r.add_argument("--reps", type=int, default=3)
    r.add_argument("--ovh-steps", type=int, default=60, help="timed steps per overhead run")
    r.add_argument("--phases", help="comma separated: only these (cnn, mlp, cuda12, sample, overhead-cnn, "
                   "overhead-mlp, cupti-share-mlp, cupti-share-cnn, nccl, launch-cost, launch-ab), run in the order given; default: all")
    a = sub.add_parser("analyze", help="tables from a run's output folder (tarballs unpacked in place)")
    a.add_argument("dir")
    a.add_argument("--steps", type=int, default=60, help="timed steps per run (run's --steps)")
    a.add_argument("--json")
    args = ap.parse_args()
    run_all(args) if args.cmd == "run" else analyze(args)


if __name__ == "__main__":
    main()
