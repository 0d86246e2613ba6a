"""A real torch training with DataLoader(num_workers=2) reading evicted files from disk.

Recorded with the default families, checked in trace_processor: named and
parented worker processes, their role marks, block reads issued by the
workers, the main thread waiting while they read, process counters.
"""
import os
import sys

import pytest

from timeline.trace_processor import open_trace
from helpers import REPO, assert_one_row_per_pid_and_tid, require_root, timeline_cmd

from test_dataloader_units import q

STEPS, BATCH = 8, 8
SAMPLE_BYTES = 3 * 64 * 64 * 4  # examples/train_dataloader.py SHAPE, float32


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    require_root()
    d = tmp_path_factory.mktemp("dataloader")
    out = {}
    for fmt, name in (("perfetto", "t.pftrace"), ("chrome", "t.json")):
        path = str(d / name)
        if fmt == "perfetto":
            cp = timeline_cmd("record", "-o", path, "--keep-raw", "--", sys.executable,
                              os.path.join(REPO, "examples", "train_dataloader.py"),
                              "--steps", str(STEPS), "--batch", str(BATCH), "--data", str(d / "data"), timeout=180)
            assert cp.returncode == 0, cp.stderr
            assert "trained" in cp.stdout
        else:  # the same recording in the other format
            cp = timeline_cmd("convert", str(d / "t.tlraw"), "-o", path)
            assert cp.returncode == 0, cp.stderr
        out[fmt] = open_trace(path)
    yield out
    for tp in out.values():
        tp.close()


def main_tid(tp):
    """How to find the main training thread (documented in docs/kernel-context.md)."""
    rows = q(tp, """select t.tid, t.upid from slice s join thread_track tt on s.track_id = tt.id
                    join thread t using (utid) where s.name = 'main training thread' and s.cat = 'dataloader'""")
    assert len(rows) == 1
    return rows[0]


def workers(tp):
    return q(tp, """select p.pid, p.upid, p.parent_upid from process p
                    join thread t on t.upid = p.upid and t.tid = p.pid where t.name = 'pt_data_worker'""")


def test_workers_named_parented_and_marked(run):
    tp = run["perfetto"]
    tid, upid = main_tid(tp)
    ws = workers(tp)
    assert len(ws) == 2 and all(w[2] == upid for w in ws)  # children of the training process
    marks = q(tp, """select t.tid, s.name, extract_arg(s.arg_set_id, 'debug.role'),
                            extract_arg(s.arg_set_id, 'debug.parent_pid')
                     from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
                     where s.cat = 'dataloader' and s.name like 'DataLoader worker %'""")
    assert sorted((m[0], m[2], m[3]) for m in marks) == sorted((w[0], "dataloader_worker", tid) for w in ws)
    (alive,) = q(tp, f"""select max(c.value) from counter c join process_counter_track t on c.track_id = t.id
                         where t.name = 'dataloader.workers' and t.upid = {upid}""")[0]
    assert alive == 2


def test_workers_read_from_disk(run):
    tp = run["perfetto"]
    ws = {w[0] for w in workers(tp)}
    rows = q(tp, """select s.name, extract_arg(s.arg_set_id, 'debug.pid'), extract_arg(s.arg_set_id, 'debug.tid'),
                           extract_arg(s.arg_set_id, 'debug.bytes'), t.name
                    from slice s join track t on s.track_id = t.id where s.cat = 'block_io'""")
    reads = [r for r in rows if r[0] == "read" and r[1] in ws]
    assert {r[1] for r in reads} == ws  # both workers read
    assert all(4096 <= r[3] <= 4 << 20 and r[4].endswith(" I/O") for r in reads)
    # every sample a worker loaded was evicted: its bytes came from the disk
    assert sum(r[3] for r in reads) >= STEPS * BATCH * SAMPLE_BYTES // 2


def test_main_thread_waits_while_workers_read(run):
    tp = run["perfetto"]
    tid, _ = main_tid(tp)
    ws = ",".join(str(w[0]) for w in workers(tp))
    (waited,) = q(tp, f"""
        select sum(min(ts.ts + ts.dur, s.ts + s.dur) - max(ts.ts, s.ts))
        from thread_state ts join thread t using (utid)
        join slice s on s.cat = 'block_io' and extract_arg(s.arg_set_id, 'debug.pid') in ({ws})
             and s.ts < ts.ts + ts.dur and ts.ts < s.ts + s.dur
        where t.tid = {tid} and ts.state in ('S', 'D')""")[0]
    assert waited and waited > 0


def test_process_counters(run):
    tp = run["perfetto"]
    _, upid = main_tid(tp)
    rows = dict(q(tp, f"""select t.name, max(c.value) from counter c join process_counter_track t on c.track_id = t.id
                          where t.upid = {upid} group by t.name"""))
    assert rows["rss_bytes"] > 50e6  # torch is loaded
    assert rows["cpu_pct"] > 0 and "minor_faults_per_s" in rows and "major_faults_per_s" in rows
    totals = q(tp, """select count(*) from slice where cat = 'counters' and name = 'thread totals'
                      and extract_arg(arg_set_id, 'debug.minor_faults') > 0""")[0][0]
    assert totals >= 3  # workers and main-process helper threads exited


def test_chrome_json_has_the_same_layout(run):
    tp = run["chrome"]
    assert q(tp, "select count(*) from slice where name = 'main training thread'")[0][0] == 1
    assert q(tp, "select count(*) from slice where name like 'DataLoader worker %'")[0][0] == 2
    assert q(tp, "select count(*) from slice where cat = 'block_io' and name = 'read'")[0][0] > 0


@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_no_ghost_processes_or_threads(run, fmt):
    """Workers, their threads and the counters/roles/block tracks bound to them
    make one process per pid and one thread per tid."""
    assert_one_row_per_pid_and_tid(run[fmt])
