"""Added step time of the net family on a 2-rank gloo all-reduce (issue 24).

    sudo python bench/net_cost.py [--steps 100] [--mib 4] [--reps 3] [--mode gloo|socket] [--softirq] [--recv-min-ms MS]

Two network namespaces joined by a veth pair (made here, removed at the end),
rank 0 in one and rank 1 in the other (tests/system/net_job.py): `--steps`
all-reduces of a `--mib` MiB float32 tensor over gloo (or, with --mode socket,
the same bytes exchanged over one TCP connection).  Runs alternate
`record -e sched` (net off) and `record -e sched,net` (net on; with --softirq
also `record -e sched,net --net-softirq`; with --recv-min-ms, `--net-recv-min-ms MS`: blocked
receives, whose syscall-entry probes are off by default), `--reps` times each; reported: median step time of each, the added share, and the net
family's records per second of recording (from the recorder's summary).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
JOB = os.path.join(REPO, "tests", "system", "net_job.py")
ADDR0, ADDR1 = "10.77.0.1", "10.77.0.2"


def ip(*args, check=True):
    subprocess.run(["ip", *args], check=check, capture_output=True)


def make_namespaces(a: str, b: str) -> None:
    ip("netns", "add", a)
    ip("netns", "add", b)
    ip("link", "add", a, "type", "veth", "peer", "name", b)
    for ns, addr in ((a, ADDR0), (b, ADDR1)):
        ip("link", "set", ns, "netns", ns)
        ip("-n", ns, "addr", "add", f"{addr}/24", "dev", ns)
        ip("-n", ns, "link", "set", ns, "up")
        ip("-n", ns, "link", "set", "lo", "up")


class BpfTime:
    """Kernel time of the net family's programs (kernel.bpf_stats_enabled), read
    with bpftool every 0.2 s while a recording runs: the programs go away with it.
    Steadier than step times on a loaded machine: the CPU the probes take."""

    def __init__(self):
        self.by_prog: dict[int, int] = {}
        self.runs: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._poll, daemon=True)

    def _poll(self):
        while not self._stop.wait(0.2):
            cp = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True)
            for p in json.loads(cp.stdout or "[]"):
                if p.get("name", "").startswith("tl_net"):
                    self.by_prog[p["id"]] = max(self.by_prog.get(p["id"], 0), p.get("run_time_ns", 0))
                    self.runs[p["id"]] = max(self.runs.get(p["id"], 0), p.get("run_cnt", 0))
                    self.names[p["id"]] = p["name"]

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    @property
    def ns(self) -> int:
        return sum(self.by_prog.values())

    def by_name(self) -> dict[str, tuple[int, int]]:
        """program name -> (kernel ns, runs)"""
        out: dict[str, tuple[int, int]] = {}
        for i, ns in self.by_prog.items():
            t, n = out.get(self.names[i], (0, 0))
            out[self.names[i]] = (t + ns, n + self.runs.get(i, 0))
        return out


def run(events: str, extra: list[str], ns: tuple[str, str], port: int, args, tmp: str) -> tuple[float, float]:
    """(mean step seconds over both ranks, net records per second)."""
    out = os.path.join(tmp, f"t{port}.pftrace")
    cmd = [sys.executable, "-m", "timeline.cli", "record", "-e", events, *extra, "-o", out, "--",
           sys.executable, JOB, "launch", *ns, ADDR0, str(port), str(args.steps), str(args.mib), args.mode]
    env = dict(os.environ, PYTHONPATH=REPO, MALLOC_MMAP_THRESHOLD_="33554432", MALLOC_TRIM_THRESHOLD_="1073741824")
    cp = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if cp.returncode:
        sys.exit(f"run failed ({events}):\n{cp.stderr[-2000:]}")
    steps = [float(x) for x in re.findall(r"step_s ([0-9.]+)", cp.stdout + cp.stderr)]
    m = re.search(r"recorded ([0-9.]+)s", cp.stderr)
    secs = float(m.group(1)) if m else 0.0
    n = sum(int(v.replace(",", "")) for v in re.findall(r"net_\w+ ([0-9,]+)", cp.stderr))
    os.unlink(out)
    return statistics.mean(steps), (n / secs if secs else 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--mib", type=float, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mode", choices=("gloo", "socket"), default="gloo")
    ap.add_argument("--softirq", action="store_true", help="a third arm: net with --net-softirq")
    ap.add_argument("--recv-min-ms", help="another arm: net with --net-recv-min-ms (blocked receives)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("net_cost: run as root (namespaces, eBPF)")
    ns = (f"tlb{os.getpid()}a", f"tlb{os.getpid()}b")
    try:
        make_namespaces(*ns)
        off, on, on_sq, on_rv, rates, bpf, bpf_rv, progs, per_run = [], [], [], [], [], [], [], {}, {}
        arms = [("sched", [], off), ("sched,net", [], on)]
        if args.softirq:
            arms.append(("sched,net", ["--net-softirq"], on_sq))
        if args.recv_min_ms:
            arms.append(("sched,net", ["--net-recv-min-ms", args.recv_min_ms], on_rv))
        subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=1"], check=True)
        with tempfile.TemporaryDirectory() as tmp:
            port = 29600
            for rep in range(args.reps):
                for events, extra, into in arms:
                    port += 1
                    with BpfTime() as t:
                        step, rate = run(events, extra, ns, port, args, tmp)
                    into.append(step)
                    if into is on_rv:
                        bpf_rv.append(t.ns / (args.steps + 1))
                    if events.endswith("net") and not extra:
                        rates.append(rate)
                        bpf.append(t.ns / (args.steps + 1))  # + the warm-up all-reduce (and the setup)
                        for name, (prog_ns, runs) in t.by_name().items():
                            progs.setdefault(name, []).append(prog_ns / (args.steps + 1))
                            if runs:
                                per_run.setdefault(name, []).append((prog_ns / runs, runs / (args.steps + 1)))
                    print(f"rep {rep} {events + ' ' + ' '.join(extra):24s} step {step * 1e3:8.3f} ms"
                          + (f"  net records/s {rate:,.0f}  BPF {bpf[-1] / 1e3:.1f} us/step"
                             if events.endswith("net") and not extra else ""), flush=True)
        a, b = statistics.median(off), statistics.median(on)
        print(f"\n{args.mode} all-reduce {args.mib:g} MiB x {args.steps} steps, {args.reps} reps each")
        print(f"median step: net off {a * 1e3:.3f} ms, net on {b * 1e3:.3f} ms, added {100 * (b - a) / a:+.2f}%")
        print(f"net records per second of recording: median {statistics.median(rates):,.0f}")
        pairs = sorted(b_ / a_ for a_, b_ in zip(off, on))
        print(f"per-rep on/off ratios: {', '.join(f'{r:.3f}' for r in pairs)}")
        if on_sq:
            c = statistics.median(on_sq)
            print(f"median step with --net-softirq {c * 1e3:.3f} ms, added {100 * (c - a) / a:+.2f}%; per-rep ratios: "
                  + ", ".join(f"{r:.3f}" for r in sorted(c_ / a_ for a_, c_ in zip(off, on_sq))))
        if on_rv:
            c, k = statistics.median(on_rv), statistics.median(bpf_rv)
            print(f"with --net-recv-min-ms {args.recv_min_ms}: median step {c * 1e3:.3f} ms; net programs' kernel time "
                  f"{k / 1e3:.1f} us per step (both ranks) = {100 * k / (a * 1e9):.2f}% of one CPU-step, "
                  f"{50 * k / (a * 1e9):.2f}% of each rank's")
        k = statistics.median(bpf)
        print(f"net programs' kernel time (without --net-softirq): median {k / 1e3:.1f} us per step (both ranks, all CPUs) = "
              f"{100 * k / (a * 1e9):.2f}% of one CPU-step of {a * 1e3:.3f} ms ({50 * k / (a * 1e9):.2f}% of each "
              f"rank's): "
              + ", ".join(f"{n} {statistics.median(v) / 1e3:.1f}" for n, v in sorted(progs.items())))
        print("per program run (median over reps): "
              + ", ".join(f"{n} {statistics.median(x[0] for x in v):.0f} ns x {statistics.median(x[1] for x in v):.0f}/step"
                          for n, v in sorted(per_run.items())))
    finally:
        subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=0"])
        for n in ns:
            ip("netns", "del", n, check=False)


if __name__ == "__main__":
    main()
