"""End to end: record real workloads, convert, read back with trace_processor."""
import os
import stat
import sys
import textwrap

import pytest

from timeline.trace_processor import open_trace
from helpers import assert_one_row_per_pid_and_tid, read_raw, require_root, timeline_cmd
from timeline import sched_records
from timeline.converters.chrome.writer import JSON_IDLE_TID
from timeline.converters import convert
from timeline.converters.model import OUTSIDE_TID

# Threads that sleep (S), spin against each other on 2 CPUs (Running, R/R+),
# and write with O_DIRECT|O_SYNC (D); a child process that execs.
WORKLOAD = textwrap.dedent("""
    import ctypes, mmap, os, subprocess, sys, threading, time
    libc = ctypes.CDLL(None)
    def named(name, fn):
        def run():
            libc.prctl(15, name.encode(), 0, 0, 0)
            fn()
        t = threading.Thread(target=run); t.start(); return t
    def spin():
        end = time.time() + 0.4
        while time.time() < end: pass
    def nap():
        for _ in range(30): time.sleep(0.005)
    def disk():
        path = os.path.join(sys.argv[1], "direct.bin")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT | os.O_SYNC, 0o600)
        buf = mmap.mmap(-1, 1 << 16)
        for i in range(40): os.pwrite(fd, buf, i << 16)
        os.close(fd); os.unlink(path)
    ts = [named(n, spin) for n in ("spin-a", "spin-b", "spin-c")] + [named("napper", nap), named("diskio", disk)]
    subprocess.run(["sleep", "0.02"])
    for t in ts: t.join()
""")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    require_root()
    d = tmp_path_factory.mktemp("content")
    out = {}
    for fmt, name in (("perfetto", "w.pftrace"), ("chrome", "w.json")):
        path = str(d / name)
        cp = timeline_cmd("record", "-o", path, "--keep-raw", "--", sys.executable, "-c", WORKLOAD, str(d))
        assert cp.returncode == 0, cp.stderr
        assert "wrote " + path in cp.stderr
        out[fmt] = path
    tps = {fmt: open_trace(p) for fmt, p in out.items()}
    yield d, out, tps
    for tp in tps.values():
        tp.close()


def rows(tp, sql):
    return tp.query(sql).rows


@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_threads_named_and_scheduled(recorded, fmt):
    _, _, tps = recorded
    tp = tps[fmt]
    names = {r[0] for r in rows(tp, "select distinct t.name from sched s join thread t using (utid)")}
    assert {"spin-a", "spin-b", "spin-c", "napper", "diskio", "sleep"} <= names
    # every named worker thread ran for real: the spinners ~0.4 s each between them
    (spin_ns,) = rows(tp, "select sum(dur) from sched join thread using (utid) where name like 'spin-%'")[0]
    assert spin_ns > 0.3e9


@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_thread_states(recorded, fmt):
    _, _, tps = recorded
    tp = tps[fmt]
    def states(thread):
        return {r[0] for r in rows(tp, f"""select distinct state from thread_state join thread using (utid)
                                          where thread.name = '{thread}'""")}
    assert {"Running", "S"} <= states("napper")
    assert "D" in states("diskio")
    spinners = set().union(*(states(n) for n in ("spin-a", "spin-b", "spin-c")))
    assert "Running" in spinners and spinners & {"R", "R+"}, spinners  # 3 spinners, 2 CPUs


@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_no_ghost_processes_or_threads(recorded, fmt):
    _, _, tps = recorded
    assert_one_row_per_pid_and_tid(tps[fmt])


@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_idle_is_idle_and_outside_only_where_a_task_ran(recorded, fmt, tmp_path):
    """A recorded switch to the idle task starts idle time (utid 0: the UI
    draws nothing); "outside the recording" starts only where the raw log
    shows an untracked task taking the CPU: a switch to it, or the recorder's
    one record of an idle CPU starting it (TL_SF_LEFT_IDLE)."""
    d, _, _ = recorded
    raw_path = str(d / "w.tlraw")  # the kept raw log of the last recording: converted again here
    raw = read_raw(raw_path)["sched"]
    sw = raw[raw["kind"] == sched_records.SCHED_SWITCH]
    f = sw["flags"]
    to_idle = sw[((f & sched_records.SF_PREV_TRACKED) != 0) & (sw["target_tid"] == 0)]
    to_outside = sw[((f & sched_records.SF_NEXT_TRACKED) == 0) & (sw["target_tid"] != 0)]
    left_idle = sw[(f & sched_records.SF_LEFT_IDLE) != 0]
    assert to_idle.size > 20
    # at most one extra record per recorded switch to idle, and only after one
    assert left_idle.size <= to_idle.size and (left_idle["tid"] == 0).all()
    idle_tid = 0 if fmt == "perfetto" else JSON_IDLE_TID
    out = str(tmp_path / ("t.pftrace" if fmt == "perfetto" else "t.json"))
    convert(raw_path, out)
    tp = open_trace(out)
    slices = rows(tp, f"""select s.cpu, s.ts, s.dur, t.tid from sched s join thread t using (utid)
                                where t.tid in ({idle_tid}, {OUTSIDE_TID})""")
    idle_starts = {(c, ts) for c, ts, _, tid in slices if tid == idle_tid}
    assert {(int(c), int(t)) for c, t in zip(to_idle["cpu"], to_idle["ts"])} <= idle_starts
    outside_ok = {(int(c), int(t)) for c, t in zip(to_outside["cpu"], to_outside["ts"])}
    bad = [(c, ts, dur) for c, ts, dur, tid in slices if tid == OUTSIDE_TID and dur > 0 and (c, ts) not in outside_ok]
    assert not bad, bad[:5]
    if fmt == "perfetto":
        assert rows(tp, "select is_idle from thread where tid = 0") == [(1,)]
    # the pseudo thread of everything outside the tree: one thread (if anything else ran), in no process
    assert rows(tp, f"select count(*), min(upid is null) from thread where tid = {OUTSIDE_TID}") in ([(1, 1)], [(0, None)])
    tp.close()


def test_process_tree_parentage(recorded):
    _, _, tps = recorded
    tp = tps["perfetto"]
    (row,) = rows(tp, """select c.name, c.cmdline, p.pid, p.cmdline from process c join process p
                         on c.parent_upid = p.upid where c.name = 'sleep'""")
    assert row[1] == "sleep 0.02"
    assert row[3].startswith(sys.executable + " -c")
    # threads belong to the python process
    (n,) = rows(tp, f"""select count(distinct t.tid) from thread t join process p using (upid)
                        where p.pid = {row[2]} and t.name in ('spin-a','spin-b','spin-c','napper','diskio')""")[0]
    assert n == 5


def test_drop_count_in_trace(recorded):
    _, _, tps = recorded
    st = dict(rows(tps["perfetto"], "select name, sum(value) from stats where name like 'ftrace_cpu_overrun_end' group by name"))
    assert st.get("ftrace_cpu_overrun_end", 0) == 0  # present, and zero for this light workload
    assert rows(tps["perfetto"], "select count(*) from stats where name = 'ftrace_cpu_overrun_end'")[0][0] >= 1


def test_trace_files_private(recorded):
    _, out, _ = recorded
    for path in out.values():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_convert_truncated_and_corrupt(recorded, tmp_path):
    d, out, tps = recorded
    raw = str(d / "w.tlraw")
    data = open(raw, "rb").read()
    cut = tmp_path / "cut.tlraw"
    cut.write_bytes(data[: len(data) * 2 // 3])
    cp = timeline_cmd("convert", str(cut), "-o", str(tmp_path / "cut.pftrace"))
    assert cp.returncode == 0, cp.stderr
    assert "is damaged at byte" in cp.stderr and "truncated" in cp.stderr
    with open_trace(str(tmp_path / "cut.pftrace")) as tp:
        (n_cut,) = tp.query("select count(*) from sched").rows[0]
    (n_full,) = tps["perfetto"].query("select count(*) from sched").rows[0]
    assert 0 < n_cut < n_full

    bad = tmp_path / "bad.tlraw"
    bad.write_bytes(b"\x00garbage" * 100)
    cp = timeline_cmd("convert", str(bad))
    assert cp.returncode == 2 and cp.stderr.strip() == f"timeline: error: {bad} is not a timeline raw log"
    cp = timeline_cmd("convert", str(tmp_path / "missing.tlraw"))
    assert cp.returncode == 2 and "does not exist" in cp.stderr
