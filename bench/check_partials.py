"""Each check with a partial (timeline/checks/partials) through trace_processor vs from the partials in a trace
set's index (issue 23).

    python bench/check_partials.py [--minutes 0.1] [--chunk-events 500000] [--checks launch_latency,...] [--all]

The synthetic 8-GPU node of bench/scale_8gpu.py (8 ranks, 10k launches/s each), converted into a
trace set twice, each in a child process (peak RSS from its VmHWM): with the checks' partial
collectors (as shipped) and without (the collectors replaced by none): the difference is what
computing the partials adds to conversion.
Then `timeline check SET --only CHECK` for each, both ways, one worker: from the index, and
through trace_processor (the same set with its index's partials taken out: how a set written before
partials is checked). Events/s per core = the set's events / CPU seconds of the step (children
included). --compare: the log converted as one trace, the checks' SQL on it (each check's own
time, after the load and prelude every check shares) and whether the index's findings equal them.
Prints one line per measurement.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, ".."))

import scale_8gpu  # noqa: E402
from timeline.checks import partials  # noqa: E402
from timeline.checks.traceset import FROM_INDEX, check_set  # noqa: E402
from timeline.converters import convert  # noqa: E402
from timeline.identity import invoking_user  # noqa: E402
from timeline.trace_processor import TraceProcessorConfig  # noqa: E402

CHECKS = partials.check_ids()  # every check with a partial


def cpu() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def timed(fn):
    t, c = time.perf_counter(), cpu()
    out = fn()
    return out, time.perf_counter() - t, cpu() - c


CONVERT = """
import json, sys, time
from timeline.checks import partials
from timeline.converters import convert
from timeline.converters.trace_set import SplitSpec
spent = [0.0]  # CPU seconds inside the collectors and the parts: the partials' own cost


def timing(fn):
    def run(*a, **k):
        c0 = time.process_time()
        try:
            return fn(*a, **k)
        finally:
            spent[0] += time.process_time() - c0
    return run


if sys.argv[4] == "0":
    partials.collectors = lambda: {}
else:
    for cid in partials.check_ids():
        mod = partials.module(cid)
        mod.part = timing(mod.part)
        for cls in (mod.Collector if isinstance(mod.Collector, tuple) else (mod.Collector,)):
            for name in ("slice", "slices", "group_slices", "async_slice", "sched", "proc"):
                f = getattr(cls, name, None)
                if f is not None and not hasattr(f, "__wrapped_timing__"):
                    f = timing(f)
                    f.__wrapped_timing__ = True
                    setattr(cls, name, f)
t, c = time.perf_counter(), time.process_time()
res = convert(sys.argv[1], sys.argv[2], split=SplitSpec(events=int(sys.argv[3])))
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
print(json.dumps({"s": time.perf_counter() - t, "cpu": time.process_time() - c, "hwm": hwm << 10,
                  "partials_cpu": spent[0],
                  "out": res.out_path, "chunks": len(res.chunks), "events": sum(x["events"] for x in res.chunks)}))
"""


def converted(raw: str, out: str, chunk_events: int, partials: bool) -> dict:
    """A conversion in a child process of its own (its peak RSS its own)."""
    env = {**os.environ, "PYTHONPATH": os.path.join(HERE, "..")}
    run = subprocess.run([sys.executable, "-c", CONVERT, raw, out, str(chunk_events), "1" if partials else "0"],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=0.1)
    ap.add_argument("--chunk-events", type=int, default=500_000)
    ap.add_argument("--no-nvtx", action="store_true", help="the log without its NVTX step ranges (with them "
                    "gpu_breakdown's partial is not written: its per-step row runs through the SQL)")
    ap.add_argument("--keep", help="work in this directory and leave it")
    ap.add_argument("--all", action="store_true", help="also every check on the set, both ways (what `timeline "
                    "check SET` costs: the index's partials, the other checks per chunk with the prelude they need)")
    ap.add_argument("--checks", default=",".join(CHECKS), help="which of them (comma-separated); the conversion "
                    "computes every partial either way")
    ap.add_argument("--compare", action="store_true", help="also check the log converted as one trace (SQL) "
                    "and say whether its findings equal the index's")
    a = ap.parse_args()
    d = a.keep or tempfile.mkdtemp(prefix="tl-partials-")
    os.makedirs(d, exist_ok=True)
    try:
        raw = os.path.join(d, "node.tlraw")
        scale_8gpu.NVTX = not a.no_nvtx
        counts = scale_8gpu.build(raw, a.minutes)
        print(f"log: {a.minutes:g} min of 8 GPUs, {counts['records']:,} records ({counts['gpu']:,} GPU, "
              f"{counts['cuda']:,} CUDA calls), load {os.getloadavg()[0]:.1f}")
        plain = converted(raw, os.path.join(d, "plain.pftrace"), a.chunk_events, partials=False)
        res = converted(raw, os.path.join(d, "with.pftrace"), a.chunk_events, partials=True)
        events = res["events"]
        dc = res["cpu"] - plain["cpu"]
        print(f"convert without partials: {plain['s']:.1f} s wall, {plain['cpu']:.1f} s CPU, peak RSS "
              f"{plain['hwm'] / 2**20:.0f} MiB; with: {res['s']:.1f} s wall, {res['cpu']:.1f} s CPU, peak RSS "
              f"{res['hwm'] / 2**20:.0f} MiB (+{dc:.2f} s CPU, {100 * dc / plain['cpu']:+.1f}%; "
              f"+{(res['hwm'] - plain['hwm']) / 2**20:.0f} MiB); {res['chunks']} chunks, {events:,} events")
        print(f"the partials' own CPU (collectors and parts, timed inside the conversion): {res['partials_cpu']:.2f} s, "
              f"{100 * res['partials_cpu'] / res['cpu']:.1f}% of it")
        with open(os.path.join(res["out"], "index.json")) as f:
            index = json.load(f)
        size = len(json.dumps(index.get(partials.PARTIALS, {}))) + sum(
            len(json.dumps(c.get(partials.PARTIALS, {}))) for c in index["chunks"])
        index_bytes = os.path.getsize(os.path.join(res["out"], "index.json"))
        print(f"index.json: {index_bytes:,} bytes, of which partials ~{size:,}; partials written: "
              f"{', '.join(index.get(partials.PARTIALS, {})) or 'none'}")
        user, tpc = invoking_user(), TraceProcessorConfig(engine="wasm")
        old = os.path.join(d, "old.tlset")
        shutil.copytree(res["out"], old)
        index.pop(partials.PARTIALS, None)
        for c in index["chunks"]:
            c.pop(partials.PARTIALS, None)
        with open(os.path.join(old, "index.json"), "w") as f:
            json.dump(index, f)
        fast = {}
        checks = [c for c in a.checks.split(",") if c]
        for check in checks:
            for name, where in (("from the index", res["out"]), ("through trace_processor", old)):
                rep, s, c = timed(lambda: check_set(where, tpc, user, [check], workers=1))
                r = rep.results[0]
                if where == res["out"]:
                    fast[check] = r
                how = "" if where == old or r.note == FROM_INDEX else " (no partial: the SQL per chunk)"
                print(f"check {check} {name}{how}: {s:.3f} s wall, {c:.3f} s CPU, {events / max(c, 1e-9) / 1e6:.3f} M "
                      f"events/s per core; status {r.status}, {len(r.findings)} findings")
        if a.all:
            for name, where in (("from the index + the rest per chunk", res["out"]), ("all through trace_processor", old)):
                rep, s, c = timed(lambda: check_set(where, tpc, user, None, workers=1))
                print(f"every check, {name}: {s:.1f} s wall, {c:.1f} s CPU, {events / max(c, 1e-9) / 1e6:.3f} M events/s "
                      f"per core; {sum(r.note == FROM_INDEX for r in rep.results)} from the index")
        if a.compare:
            from timeline.checks import run_checks
            from timeline.trace_processor import open_trace

            one = os.path.join(d, "one.pftrace")
            convert(raw, one)
            with open_trace(one, engine="wasm") as tp:
                wants = run_checks(tp, one, only=checks).results
            for want in wants:
                got = fast[want.check.id]
                print(f"single trace through SQL, {want.check.id}: its own statements {want.seconds:.2f} s (after "
                      f"the load and prelude all checks share); {want.status}, {[f.message for f in want.findings]}; "
                      f"the index's findings equal: {(got.status, got.findings) == (want.status, want.findings)}"
                      + ("" if got.note == FROM_INDEX else " (no partial in the index: the set's SQL, per chunk)"))
        print(f"load at the end {os.getloadavg()[0]:.1f}")
    finally:
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
