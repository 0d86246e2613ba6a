"""--ring flight recorder for real (issue 15): the last window kept, SIGUSR2 and a dying
process dump it. Segments and names: tests/unit/test_ring.py.
"""
import glob
import os
import signal
import subprocess
import sys
import textwrap
import time

from timeline.trace_processor import open_trace
from helpers import read_raw, require_root

# Named threads born at once, each waking every 2 ms for RUN_S seconds: sched
# events flow steadily while the names exist only in the first segments.
RUN_S = 20
WORKLOAD = textwrap.dedent(f"""
    import ctypes, threading, time
    libc = ctypes.CDLL(None)
    def nap(name):
        libc.prctl(15, name.encode(), 0, 0, 0)
        end = time.time() + {RUN_S}
        while time.time() < end: time.sleep(0.002)
    ts = [threading.Thread(target=nap, args=(f"ringer-{{i}}",)) for i in range(4)]
    for t in ts: t.start()
    print("ready", flush=True)
    for t in ts: t.join()
""")
DISK_BOUND = 24 << 20  # segments on disk at any time (stated in docs/long-jobs.md)


def _coverage(path):
    with open_trace(path) as tp:
        lo, hi = tp.query("select min(ts), max(ts + dur) from sched").rows[0]
        names = {r[0] for r in tp.query(
            "select distinct t.name from thread_state s join thread t using(utid) where t.tid != 0").rows}
        unnamed = tp.query("select count(distinct utid) from thread_state s join thread t using(utid) "
                           "where t.tid != 0 and (t.name is null or t.name = '')").rows[0][0]
    return (hi - lo) / 1e9, names, unnamed


def test_ring_keeps_last_window_bounded_and_dumps_on_sigusr2(tmp_path):
    require_root()
    out = str(tmp_path / "r.pftrace")
    p = subprocess.Popen([sys.executable, "-m", "timeline.cli", "record", "-e", "sched", "--ring", "5s",
                          "--keep-raw", "-o", out, "--", sys.executable, "-c", WORKLOAD],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    seg_glob = str(tmp_path / "r.tlraw.seg*")
    disk, counts, dumped = [], [], False
    t0 = time.monotonic()
    while p.poll() is None:
        files = glob.glob(seg_glob)
        disk.append(sum(os.path.getsize(f) for f in files if os.path.exists(f)))
        counts.append(len(files))
        if not dumped and time.monotonic() - t0 > 9:
            os.kill(p.pid, signal.SIGUSR2)  # mid-run dump; recording goes on
            dumped = True
        time.sleep(0.2)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert dumped and "dump 1: wrote" in err
    # bounded: at most keep/(keep/4) + 2 segments, and their size does not grow with the run
    assert max(counts) <= 6, counts
    assert max(disk) < DISK_BOUND, max(disk)
    late, early = max(disk[len(disk) // 2:]), max(disk[: len(disk) // 2])
    assert late < 1.6 * early, (early, late)
    assert not glob.glob(seg_glob)  # segments are removed at the end
    # the trace at exit: the last 5 s, every thread named (names were set ~15 s before the window)
    span, names, unnamed = _coverage(out)
    assert abs(span - 5) <= 0.5, span
    assert {f"ringer-{i}" for i in range(4)} <= names and unnamed == 0
    raw = read_raw(out[: -len(".pftrace")] + ".tlraw")
    assert raw["sched"].size and raw["header"]["ring"]["keep_ns"] == 5 * 10**9
    # the SIGUSR2 dump: its own file, the 5 s before the signal, recording went on after it
    dump = str(tmp_path / "r.1.pftrace")
    span1, names1, unnamed1 = _coverage(dump)
    assert abs(span1 - 5) <= 0.5 and unnamed1 == 0 and {f"ringer-{i}" for i in range(4)} <= names1
    d_raw = read_raw(str(tmp_path / "r.1.tlraw"))
    assert int(d_raw["sched"]["ts"].max()) < int(raw["sched"]["ts"].min())  # ~6 s apart: two windows
    # `timeline convert` works on the dump's raw log
    cp = subprocess.run([sys.executable, "-m", "timeline.cli", "convert", str(tmp_path / "r.1.tlraw"),
                         "-o", str(tmp_path / "again.json")], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    assert os.path.getsize(tmp_path / "again.json") > 1000


# A child of the job kills itself while its parent runs on.
DIES = textwrap.dedent("""
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import os, time\\nend = time.time() + 1\\nwhile time.time() < end: time.sleep(0.002)\\nos.kill(os.getpid(), 9)"])
    child.wait()
    print(child.pid, flush=True)
    time.sleep(3)
""")


def test_ring_dumps_when_a_process_dies_from_a_signal(tmp_path):
    require_root()
    out = str(tmp_path / "k.pftrace")
    cp = subprocess.run([sys.executable, "-m", "timeline.cli", "record", "-e", "sched", "--ring", "10s",
                         "--keep-raw", "-o", out, "--", sys.executable, "-c", DIES],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    child = int(cp.stdout.split()[0])
    assert "dump 1: wrote" in cp.stderr and not os.path.exists(tmp_path / "k.2.pftrace")
    dump = read_raw(str(tmp_path / "k.1.tlraw"))
    assert dump["end"]["reason"] == f"dump 1 (pid {child} killed by signal 9)"
    sched = dump["sched"]
    assert ((sched["tid"] == child) | (sched["target_tid"] == child)).sum() > 50  # its last second is in
