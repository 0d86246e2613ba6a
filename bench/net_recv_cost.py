"""Cost of the net family's receive-syscall programs (tl_net_recvfrom/recvmsg), per call.

    sudo python bench/net_recv_cost.py [--calls 200000] [--reps 3]

The entry tracepoints run on every recvfrom()/recvmsg() of the machine, so a
process that is not recorded pays for the program's early exit (the
tracked-thread lookup) and for the syscall slow path that any syscall
tracepoint puts every task on.  Four loops of `--calls` loopback TCP
ping-pongs (send 1 byte, recv 1 byte; two syscalls, one recvfrom):

    untracked, no recording     the baseline wall time per ping-pong
    untracked, net recording    `record -e net -- sleep` runs meanwhile: wall time,
                                and the programs' own time per run (bpf_stats)
    tracked                     the loop is the recorded command: programs' time per run
    tracked, non-blocking       the same with the receiving socket O_NONBLOCK (Gloo's
                                device threads, NCCL's socket transport, asyncio)

Programs are told apart from other recordings on the machine by id: those
that appear after the recording starts.  Prints medians over `--reps`.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PROGS = ("tl_net_recvfrom", "tl_net_recvmsg", "tl_net_recv", "tl_net_send")


def loop(calls: int, nonblock: bool = False) -> float:
    """Seconds per ping-pong over a loopback TCP connection."""
    lst = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(lst.getsockname())
    b, _ = lst.accept()
    b.setblocking(not nonblock)
    t0 = time.perf_counter()
    for _ in range(calls):
        a.send(b"x")
        while True:  # loopback delivers within send(): a retry is rare
            try:
                b.recv(1)
                break
            except BlockingIOError:
                select.select([b], [], [])
    t = time.perf_counter() - t0
    for s in (a, b, lst):
        s.close()
    return t / calls


def progs() -> dict[int, dict]:
    cp = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True)
    return {p["id"]: p for p in json.loads(cp.stdout or "[]") if p.get("name") in PROGS}


def per_run(before: dict[int, dict], after: dict[int, dict], old: set[int]) -> dict[str, tuple[float, int]]:
    """name -> (ns per run, runs) between two snapshots, programs not in `old` only."""
    out = {}
    for i, p in after.items():
        if i in old:
            continue
        b = before.get(i, {})
        runs = p.get("run_cnt", 0) - b.get("run_cnt", 0)
        ns = p.get("run_time_ns", 0) - b.get("run_time_ns", 0)
        if runs:
            out[p["name"]] = (ns / runs, runs)
    return out


def record(cmd: list[str], out: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "timeline.cli", "record", "-q", "-e", "net", "-o", out, "--", *cmd],
                            env=dict(os.environ, PYTHONPATH=REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_attached(old: set[int], timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(p["name"] == "tl_net_recv" and i not in old for i, p in progs().items()):
            time.sleep(0.3)
            return
        time.sleep(0.1)
    sys.exit("net_recv_cost: the recording's programs did not appear (is the net family built?)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--nonblock", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:  # the recorded loop
        loop(args.calls, args.nonblock)
        return
    if os.geteuid() != 0:
        sys.exit("net_recv_cost: run as root (eBPF)")
    subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=1"], check=True)
    base, traced, untracked, tracked, tracked_nb = [], [], {}, {}, {}
    out = f"/tmp/net_recv_cost{os.getpid()}.pftrace"
    try:
        for rep in range(args.reps):
            base.append(loop(args.calls))
            old = set(progs())
            rec = record(["sleep", "600"], out)
            try:
                wait_attached(old)
                s0 = progs()
                traced.append(loop(args.calls))
                for k, v in per_run(s0, progs(), old).items():
                    untracked.setdefault(k, []).append(v)
            finally:
                rec.terminate()  # SIGTERM: the recorder stops and writes its trace
                rec.communicate(timeout=120)
            for extra, into in (([], tracked), (["--nonblock"], tracked_nb)):
                old = set(progs())
                rec = record([sys.executable, os.path.abspath(__file__), "--child", "--calls", str(args.calls), *extra],
                             out)
                snap: dict[int, dict] = {}
                while rec.poll() is None:  # the programs vanish with the recording: keep each one's last reading
                    snap.update(progs())
                    time.sleep(0.1)
                for k, v in per_run({}, snap, old).items():
                    into.setdefault(k, []).append(v)
                rec.communicate()
            print(f"rep {rep}: ping-pong {base[-1] * 1e9:.0f} ns without recording, {traced[-1] * 1e9:.0f} ns "
                  f"with net recording (not tracked)", flush=True)
    finally:
        subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=0"])
        for p in (out, out[:-len(".pftrace")] + ".tlraw"):
            if os.path.exists(p):
                os.unlink(p)

    def med(d):
        return ", ".join(f"{k} {statistics.median(x[0] for x in v):.0f} ns x {statistics.median(x[1] for x in v):.0f}"
                         for k, v in sorted(d.items()))

    b, t = statistics.median(base), statistics.median(traced)
    print(f"\n{args.calls} loopback ping-pongs (send + recv), {args.reps} reps, medians")
    print(f"untracked process: {b * 1e9:.0f} ns per ping-pong without recording, {t * 1e9:.0f} ns while net records "
          f"({(t - b) * 1e9:+.0f} ns)")
    print(f"untracked process, programs per run: {med(untracked)}")
    print(f"tracked thread (the recorded loop), programs per run: {med(tracked)}")
    print(f"tracked thread, non-blocking socket, programs per run: {med(tracked_nb)}")


if __name__ == "__main__":
    main()
