"""Recording windows for real (issue 15): --delay and SIGUSR1 on a recorded workload.
The window arithmetic: tests/unit/test_capture.py.
"""
import sys
import textwrap

import numpy as np

from timeline import proc_records
from timeline.trace_processor import open_trace
from helpers import read_raw, require_root, timeline_cmd

# Named threads start at once and wake every 10 ms for 3.5 s: with --delay 2
# they exist (fork, rename) only before recording starts.
WORKLOAD = textwrap.dedent("""
    import ctypes, threading, time
    libc = ctypes.CDLL(None)
    def nap(name):
        libc.prctl(15, name.encode(), 0, 0, 0)
        end = time.time() + 3.5
        while time.time() < end: time.sleep(0.01)
    ts = [threading.Thread(target=nap, args=(f"early-{i}",)) for i in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
""")


def test_delay_starts_late_but_knows_every_thread(tmp_path):
    require_root()
    out = str(tmp_path / "d.pftrace")
    cp = timeline_cmd("record", "-q", "-e", "sched", "--delay", "2", "--keep-raw", "-o", out,
                      "--", sys.executable, "-c", WORKLOAD)
    assert cp.returncode == 0, cp.stderr
    raw = read_raw(out[: -len(".pftrace")] + ".tlraw")
    (start,) = [m["start"] for m in raw["metas"] if m.get("type") == "capture"]
    sched, proc = raw["sched"], raw["proc"]
    assert sched.size and int(sched["ts"].min()) >= start
    # the threads were born and named before recording began, and still are known
    renames = proc[proc["kind"] == proc_records.PROC_RENAME]
    assert sum(int(t) < start for t in renames["ts"]) >= 4
    assert int(sched["ts"].max()) - start > 1e9  # ~1.5 s recorded after the delay
    with open_trace(out) as tp:
        first = tp.query("select min(ts) from sched").rows[0][0]
        assert first >= start
        named = {r[0] for r in tp.query(
            "select distinct t.name from thread_state s join thread t using(utid) where t.tid != 0").rows}
        unnamed = tp.query("select count(distinct utid) from thread_state s join thread t using(utid) "
                           "where t.tid != 0 and (t.name is null or t.name = '')").rows[0][0]
    assert {f"early-{i}" for i in range(4)} <= named
    assert unnamed == 0


PAUSED = textwrap.dedent("""
    import ctypes, threading, time
    libc = ctypes.CDLL(None)
    def nap(name):
        libc.prctl(15, name.encode(), 0, 0, 0)
        end = time.time() + 4
        while time.time() < end: time.sleep(0.01)
    ts = [threading.Thread(target=nap, args=(f"nap-{i}",)) for i in range(2)]
    for t in ts: t.start()
    print("ready", flush=True)
    for t in ts: t.join()
""")


def test_sigusr1_toggles_recording(tmp_path):
    require_root()
    import os, signal, subprocess, time
    out = str(tmp_path / "t.tlraw")
    p = subprocess.Popen([sys.executable, "-m", "timeline.cli", "record", "-q", "-e", "sched", "--raw-only",
                          "-o", out, "--", sys.executable, "-c", PAUSED],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.8)
    os.kill(p.pid, signal.SIGUSR1)  # off
    time.sleep(1.2)
    os.kill(p.pid, signal.SIGUSR1)  # on again
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    raw = read_raw(out)
    caps = [m for m in raw["metas"] if m.get("type") == "capture"]
    (off,) = [m["off"] for m in caps if "off" in m]
    (on,) = [m["on"] for m in caps if "on" in m]
    assert 0.9e9 < on - off < 3e9
    ts = raw["sched"]["ts"].astype(np.int64)
    assert ((ts < off) | (ts >= on)).all()
    assert (ts < off).sum() > 50 and (ts >= on).sum() > 50  # recorded on both sides of the pause
