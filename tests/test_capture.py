"""Recording windows (issue 15): --delay keeps the process tree from the start."""
import sys
import textwrap

import numpy as np

from timeline import events
from timeline.capture import CaptureWindow
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


def test_window_keeps_proc_whole_and_others_from_start():
    sched = np.zeros(6, events.SCHED_EVENT)
    sched["ts"] = [10, 20, 30, 40, 50, 60]
    proc = np.zeros(3, events.PROC_EVENT)
    proc["ts"] = [5, 35, 70]
    w = CaptureWindow(35)
    kept = events.decode_ring_bytes(w.keep(events.RING_SCHED, events.encode_ring_bytes(sched),
                                           events.ring_stride(events.SCHED_EVENT)), events.SCHED_EVENT)
    assert list(kept["ts"]) == [40, 50, 60]
    raw = events.encode_ring_bytes(proc)
    assert w.keep(events.RING_PROC, raw, events.ring_stride(events.PROC_EVENT)) == raw


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
    renames = proc[proc["kind"] == events.PROC_RENAME]
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
