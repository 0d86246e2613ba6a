"""What timeline costs a training run, accounted in CPU time (issue 6, workload 2).

    sudo python bench/overhead_accounting.py [--model cnn|mlp] [--steps 300] [--events default|LIST]
                                             [--runs N] [--src DIR ...] [--progs PREFIX]

Step-time ratios on this 2-core VM drift by ±15% between identical runs
(bench/overhead.py reports them with their spread), far more than the
effect we want to bound.  This script measures the cost directly instead,
for recorded runs of examples/train_cpu.py:

- probes: kernel time spent in timeline's BPF programs, from the kernel's own
  per-program counters (`kernel.bpf_stats_enabled=1`, read with bpftool);
- recorder: CPU time of the timeline process itself from the launch of the
  workload until its BPF programs are closed (ring drains, samplers, CUDA
  maps watching, final drain), which competes with the workload for the 2
  cores; summed over its threads from /proc/PID/task/*/schedstat
  (nanoseconds; utime/stime ticks are 10 ms, as coarse as the whole effect).
  Also shown from the first loaded program on: that adds loading the other
  BPF objects (the verifier's CPU time), discovery and attaching, done before
  the workload starts;
- workload: CPU time of the recorded process tree (main process + DataLoader
  workers).

added = (probes + recorder from launch) / workload.  steady = the same from 40% to
90% of the recording's time: what a long job pays, without the once-per-run costs.  Uprobe trap entry (~0.8 µs per
CUDA call, see bench/cuda_probe_cost.py) is not in the BPF counters; this
CPU workload makes no CUDA calls.  Conversion after the run is reported
separately (it runs after training has finished).

--tty runs the recorder with its stderr on a pseudo-terminal and without -q,
as in an interactive shell: it then keeps a status line up to date.

--src DIR (repeatable) runs the `timeline` package of another checkout (a
`git archive` of an older commit with its built .bpf.o files, say) next to
this one: runs alternate between them, so their medians come from the same
invocation and the same machine load.
"""
from __future__ import annotations

import argparse
import json
import os
import pty
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORKLOAD = os.path.join(REPO, "examples", "train_cpu.py")
STATS = "/proc/sys/kernel/bpf_stats_enabled"
POLL_S = 0.05        # recorder CPU and program presence: cheap reads
LAUNCH_POLL_S = 0.005  # until the workload is launched: its start bounds the window
SLOW_EVERY_S = 0.5  # listing fds and child processes


def thread_ns(pid: int, seen: dict[int, int]) -> int:
    """CPU ns of a process, summed over its threads (threads that ended keep
    their last value in `seen`)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                seen[int(tid)] = max(seen.get(int(tid), 0), int(f.read().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    return sum(seen.values())


class ProgWatch:
    """The BPF programs a process holds and the kernel's run counters of
    each, from /proc/PID/fdinfo: only this recorder's programs (other
    recordings may run on the machine at the same time), and no bpftool
    process per poll."""

    def __init__(self, pid: int):
        self.pid = pid
        self.info: dict[str, int] = {}  # fd -> our open /proc/PID/fdinfo/fd, read again with pread
        self.stats: dict[int, tuple[int, int]] = {}  # prog id -> (run_time_ns, run_cnt), last read
        self.names: dict[int, str] = {}

    def rescan(self) -> None:
        """Find the recorder's program fds (objects load one after another)."""
        try:
            fds = os.listdir(f"/proc/{self.pid}/fd")
        except OSError:
            return
        for fd in fds:
            if fd in self.info:
                continue
            try:
                if os.readlink(f"/proc/{self.pid}/fd/{fd}") == "anon_inode:bpf-prog":
                    self.info[fd] = os.open(f"/proc/{self.pid}/fdinfo/{fd}", os.O_RDONLY)
            except OSError:
                pass

    def read(self) -> bool:
        """Update the counters; False once the programs are gone."""
        live = False
        for fd, h in list(self.info.items()):
            try:
                text = os.pread(h, 4096, 0).decode()
            except OSError:
                text = ""
            kv = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
            if "run_time_ns" not in kv:  # closed (or the number reused for another file)
                os.close(h)
                del self.info[fd]
                continue
            live = True
            self.stats[int(kv["prog_id"])] = (int(kv["run_time_ns"]), int(kv["run_cnt"]))
        if set(self.stats) - set(self.names):
            out = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True).stdout
            self.names.update({p["id"]: p.get("name", "") for p in json.loads(out or "[]") if p["id"] in self.stats})
        return live

    def close(self) -> None:
        for h in self.info.values():
            os.close(h)
        self.info.clear()


def launched(pid: int) -> bool:
    """Whether the recorder's workload child has exec'ed (it also runs ldconfig)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
    except OSError:
        return False
    for kid in kids:
        try:
            with open(f"/proc/{kid}/cmdline", "rb") as f:
                if WORKLOAD.encode() in f.read():
                    return True
        except OSError:
            pass
    return False


def cpu_of(p: psutil.Process) -> float:
    try:
        t = p.cpu_times()
        return t.user + t.system
    except psutil.Error:
        return 0.0


def one_run(src: str, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="tl-acct-") as d:
        out = os.path.join(d, "t.pftrace")
        rec = [sys.executable, "-m", "timeline.cli", "record", *([] if args.tty else ["-q"]), "--keep-raw", "-o", out]
        if args.events != "default":
            rec += ["--events", args.events]
        cmd = [*rec, "--", sys.executable, WORKLOAD, "--model", args.model, "--steps", str(args.steps),
               "--warmup", "10", "--json"]
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="33554432", MALLOC_TRIM_THRESHOLD_="1073741824",
                   PYTHONPATH=src)
        term = pty.openpty() if args.tty else None
        recorder = psutil.Popen(cmd, env=env, cwd=src, stdout=subprocess.PIPE,
                                stderr=term[1] if term else subprocess.DEVNULL, text=True)
        if term:
            os.close(term[1])
            os.set_blocking(term[0], False)
        watch = ProgWatch(recorder.pid)
        tree: dict[int, psutil.Process] = {}
        tree_cpu: dict[int, float] = {}
        rec_threads: dict[int, int] = {}
        rec_ns = 0
        loaded_ns = unloaded_ns = None  # recorder CPU when programs were first / last seen
        launched_ns = None  # recorder CPU when its first child (the workload) was seen
        t_conv = None
        next_slow = 0.0
        series: list[tuple[float, int, int, float]] = []  # (time, recorder ns, probes ns, workload s) while recording
        while recorder.poll() is None:
            now = time.monotonic()
            slow = now >= next_slow
            if slow:
                next_slow = now + SLOW_EVERY_S
            if slow or (loaded_ns is None and not watch.info):  # find the load at once
                watch.rescan()
            rec_ns = thread_ns(recorder.pid, rec_threads)
            if watch.read():
                if loaded_ns is None:
                    loaded_ns = rec_ns
                unloaded_ns = rec_ns
            elif loaded_ns is not None and t_conv is None:
                t_conv = time.perf_counter()  # programs gone: recording over, converting
            if launched_ns is None and loaded_ns is not None and launched(recorder.pid):
                launched_ns = rec_ns
            if slow:  # listing children reads every /proc/PID/stat: not at every poll
                try:
                    for p in recorder.children(recursive=True):
                        tree.setdefault(p.pid, p)
                except psutil.Error:
                    pass
            for pid, p in tree.items():
                tree_cpu[pid] = max(tree_cpu.get(pid, 0.0), cpu_of(p))
            if launched_ns is not None and t_conv is None and loaded_ns is not None:
                series.append((now, rec_ns, sum(rt for rt, _ in watch.stats.values()), sum(tree_cpu.values())))
            if term:
                try:
                    while os.read(term[0], 65536):  # the status line: keep the terminal from filling
                        pass
                except BlockingIOError:
                    pass
                except OSError:  # EIO: the recorder closed it
                    pass
            time.sleep(POLL_S if launched_ns is not None else LAUNCH_POLL_S)
        if term:
            os.close(term[0])
        conv_s = time.perf_counter() - t_conv if t_conv else 0.0
        stdout = recorder.stdout.read()
        raw = out[: -len(".pftrace")] + ".tlraw"
        raw_size = os.path.getsize(raw) if os.path.exists(raw) else 0
        py = pystack_counts(raw) if os.path.exists(raw) else {}
    line = next((ln for ln in stdout.splitlines() if ln.startswith("BENCH ")), None)
    work = sum(tree_cpu.values())
    watch.close()
    progs = {i: (watch.names.get(i, f"id {i}"), rt, cnt) for i, (rt, cnt) in watch.stats.items()}
    probe_s = sum(v[1] for v in progs.values()) / 1e9
    load_s = ((unloaded_ns or 0) - (loaded_ns or 0)) / 1e9
    rec_s = ((unloaded_ns or 0) - (launched_ns or unloaded_ns or 0)) / 1e9
    pct = (lambda x: x / work * 100) if work else (lambda x: 0.0)
    steady = steady_pct(series)
    return {"src": src, "steps": len(json.loads(line[6:])["step_s"]) if line else 0, "progs": progs,
            "work": work, "probe_s": probe_s, "rec_s": rec_s, "load_s": load_s, "rec_all_s": rec_ns / 1e9,
            "probe_pct": pct(probe_s), "rec_pct": pct(rec_s), "load_pct": pct(load_s),
            "added_pct": pct(probe_s + rec_s), "steady_pct": steady, "raw_mb": raw_size / 1e6, "conv_s": conv_s,
            "py": py}


def pystack_line(r: dict) -> str:
    """BPF time per stack taken: tl_py_sample per sample, tl_py_switch per
    switch walk (walks that are neither samples nor calls), py_stats' own."""
    py, rt = r["py"], {name: t for name, t, _ in r["progs"].values()}
    sw = py["walks"] - py["samples"] - py["calls"]
    per = lambda t, n: f"{t / n:,.0f} ns" if n > 0 else "-"  # noqa: E731
    return (f"pystack: {py['samples']:,} samples, tl_py_sample {per(rt.get('tl_py_sample', 0), py['samples'])} "
            f"a sample; {sw:,} switch walks ({py['waits']:,} waits recorded), tl_py_switch "
            f"{per(rt.get('tl_py_switch', 0), sw)} a walk; py_stats walk_ns/timed_walks {per(py['walk_ns'], py['timed_walks'])}; "
            f"{py['stacks']:,} distinct stacks, {py['unresolved']:,} frames unresolved")


def pystack_counts(raw: str) -> dict:
    """The pystack family's records by kind (call, wait, sample) and its last
    py_stats, from the raw log: per-program BPF time over the number of
    stacks it took (a sample program runs on every CPU's timer, for any task)."""
    from timeline.pystack import records as R
    from timeline.rawlog import KIND_META, KIND_RING, RawLogReader
    kinds = {R.PY_CALL: "calls", R.PY_WAIT: "waits", R.PY_SAMPLE: "samples"}
    n = dict.fromkeys(kinds.values(), 0)
    stats: dict = {}
    rd = RawLogReader(raw)
    try:
        for b in rd.blocks():
            if b.kind == KIND_RING and b.ring == R.RING_PYSTACK:
                off = 0
                while off + 8 <= len(b.payload):  # BPF ring records: a u32 length, a u32, the record, to 8 bytes
                    size = int.from_bytes(b.payload[off:off + 4], "little") & 0x3FFFFFFF
                    if size == R.PY_EVENT.itemsize:
                        kind = np.frombuffer(b.payload, R.PY_EVENT, 1, off + 8)["kind"][0]
                        if kind in kinds:
                            n[kinds[kind]] += 1
                    off += 8 + (size + 7) // 8 * 8
            elif b.kind == KIND_META and b"py_stats" in b.payload[:40]:
                stats = b.json()
    finally:
        rd.close()
    return {**n, "walks": stats.get("walks", 0), "walk_ns": stats.get("walk_ns", 0),
            "timed_walks": stats.get("timed_walks", stats.get("walks", 0)),  # those walk_ns counts
            "stacks": stats.get("stacks", 0), "unresolved": stats.get("unresolved_frames", 0)}


def steady_pct(series: list[tuple[float, int, int, float]]) -> float:
    """Added CPU (recorder + probes) over the workload's CPU in the middle of the
    recording, 40% to 90% of its time: the steady state of training, without the
    once-per-run costs (reading a new interpreter's ELF file, naming the stacks
    of imports and the first steps) that a short benchmark run weighs heavily."""
    if len(series) < 10:
        return float("nan")
    t0, t1 = series[0][0], series[-1][0]
    a = next(x for x in series if x[0] >= t0 + 0.4 * (t1 - t0))
    b = next(x for x in series if x[0] >= t0 + 0.9 * (t1 - t0))
    work = b[3] - a[3]
    return ((b[1] - a[1]) + (b[2] - a[2])) / 1e9 / work * 100 if work > 0 else float("nan")


def report_detail(r: dict, args) -> None:
    print(f"workload {args.model}, {r['steps']} timed steps, events={args.events}, timeline from {r['src']}"
          f"{', status line on a terminal' if args.tty else ''}")
    print(f"{'program':18s} {'runs':>10s} {'ns/run':>8s} {'total ms':>9s}")
    for name, rt, cnt in sorted(r["progs"].values(), key=lambda v: -v[1]):
        if cnt:
            print(f"{name:18s} {cnt:10,d} {rt / cnt:8.0f} {rt / 1e6:9.1f}")
    runs = sum(v[2] for v in r["progs"].values())
    print(f"\nworkload CPU (main + workers)  {r['work']:8.2f} s")
    print(f"probes (BPF programs)          {r['probe_s']:8.3f} s  {r['probe_pct']:6.2f} %  ({runs:,} runs)")
    print(f"recorder from launch           {r['rec_s']:8.3f} s  {r['rec_pct']:6.2f} %  "
          "(ring drains, samplers, maps watching, final drain)")
    print(f"  added CPU while training     {r['probe_s'] + r['rec_s']:8.3f} s  {r['added_pct']:6.2f} %")
    print(f"  of it in the steady state    {'':8s}    {r['steady_pct']:6.2f} %  (40-90% of the recording's time)")
    print(f"recorder from first program    {r['load_s']:8.3f} s  {r['load_pct']:6.2f} %  "
          "(+ loading the other objects, discovery, attaching: before the workload starts)")
    print(f"recorder in all                {r['rec_all_s']:8.3f} s  (load, discovery, conversion too)")
    print(f"raw log {r['raw_mb']:.1f} MB; conversion after the run took {r['conv_s']:.1f} s\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--events", default="default")
    ap.add_argument("--tty", action="store_true", help="recorder on a terminal, with its status line")
    ap.add_argument("--runs", type=int, default=1, help="runs per source (alternating), medians reported")
    ap.add_argument("--progs", default="", metavar="PREFIX",
                    help="with several runs: each run's BPF programs whose names start so (runs, ns/run)")
    ap.add_argument("--src", action="append", default=[],
                    help="checkout whose timeline package to run (repeatable; default: this one)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: run with sudo")
    srcs = [os.path.abspath(s) for s in args.src] or [REPO]
    old = open(STATS).read().strip()
    with open(STATS, "w") as f:
        f.write("1")
    results: dict[str, list[dict]] = {s: [] for s in srcs}
    try:
        for i in range(args.runs):
            for s in (srcs if i % 2 == 0 else srcs[::-1]):  # alternate which goes first
                r = one_run(s, args)
                results[s].append(r)
                if args.runs == 1:
                    report_detail(r, args)
                else:
                    print(f"run {i + 1} {s}: workload {r['work']:.2f} s, probes {r['probe_pct']:.2f} %, "
                          f"recorder {r['rec_s'] * 1e3:.1f} ms {r['rec_pct']:.2f} % (from load "
                          f"{r['load_s'] * 1e3:.1f} ms {r['load_pct']:.2f} %), added {r['added_pct']:.2f} %, "
                          f"steady {r['steady_pct']:.2f} %",
                          flush=True)
                    for name, rt, cnt in sorted(r["progs"].values(), key=lambda v: -v[1]):
                        if args.progs and name.startswith(args.progs) and cnt:
                            print(f"    {name:18s} {cnt:10,d} runs {rt / cnt:8.0f} ns/run {rt / 1e6:9.1f} ms", flush=True)
                    if args.progs and r["py"].get("walks"):
                        print("    " + pystack_line(r), flush=True)
    finally:
        with open(STATS, "w") as f:
            f.write(old)
    if args.runs > 1 or len(srcs) > 1:
        print(f"\nmedians over {args.runs} run(s), model {args.model}, events={args.events}"
              f"{', status line on a terminal' if args.tty else ''}:")
        print(f"{'timeline from':32s} {'workload s':>10s} {'probes %':>9s} {'recorder ms':>12s} "
              f"{'recorder %':>11s} {'added %':>8s} {'steady %':>9s} {'from load ms':>13s} {'from load %':>12s}")
        for s, rs in results.items():
            med = {k: statistics.median(r[k] for r in rs)
                   for k in ("work", "probe_pct", "rec_s", "rec_pct", "added_pct", "steady_pct", "load_s", "load_pct")}
            print(f"{s[-32:]:32s} {med['work']:10.2f} {med['probe_pct']:9.2f} {med['rec_s'] * 1e3:12.1f} "
                  f"{med['rec_pct']:11.2f} {med['added_pct']:8.2f} {med['steady_pct']:9.2f} {med['load_s'] * 1e3:13.1f} "
                  f"{med['load_pct']:12.2f}")


if __name__ == "__main__":
    main()
