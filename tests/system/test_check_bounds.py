"""`timeline check` on a crafted trace whose threads span ~31 years: the
windowed checks cut a span into at most WINDOW_CAP windows (widening them),
so the work follows the number of windows, not the span (issue 20: 83 s and
3.4 GB, then the engine crashed)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from helpers import REPO
from timeline.checks import run_checks
from timeline.checks.catalog import WINDOW_CAP
from timeline.trace_processor import open_trace

SPAN_NS = int(31 * 365.25 * 86400 * 1e9)
MAIN, WORKER = 100, 101
MS = 10**6
T0 = 10**9


def decades_trace(path) -> str:
    """A main thread and a DataLoader worker; the main thread is runnable for
    half of ~31 years, then sleeps until the worker wakes it at the end."""
    t = pb.Trace()
    tree = t.packet.add(trusted_packet_sequence_id=1).process_tree
    for pid, ppid, name in ((MAIN, 1, "python3"), (WORKER, MAIN, "pt_data_worker")):
        tree.processes.add(pid=pid, ppid=ppid, cmdline=[name])
        tree.threads.add(tid=pid, tgid=pid, name=name)
    bundle = t.packet.add(trusted_packet_sequence_id=1).ftrace_events
    bundle.cpu = 0

    def switch(ts, prev, nxt, prev_state):
        e = bundle.event.add(timestamp=ts, pid=prev)
        e.sched_switch.MergeFrom(pb.SchedSwitchFtraceEvent(prev_pid=prev, prev_comm="a", prev_prio=120,
                                                           prev_state=prev_state, next_pid=nxt, next_comm="b",
                                                           next_prio=120))

    half = SPAN_NS // 2
    switch(T0, 0, MAIN, 0)
    switch(T0 + MS, MAIN, WORKER, 0)  # preempted: runnable until half-way
    switch(T0 + half, WORKER, MAIN, 1)
    switch(T0 + half + MS, MAIN, WORKER, 1)  # asleep until the worker wakes it
    e = bundle.event.add(timestamp=T0 + SPAN_NS, pid=WORKER)
    e.sched_waking.MergeFrom(pb.SchedWakingFtraceEvent(pid=MAIN, comm="a", prio=120, target_cpu=0))
    switch(T0 + SPAN_NS + MS, WORKER, MAIN, 1)
    switch(T0 + SPAN_NS + 2 * MS, MAIN, 0, 1)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())
    return str(path)


def run_measured(args, timeout: float):
    """(returncode, stdout, stderr, max RSS in MiB) of a child, killed after `timeout` s."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    out: dict = {}
    readers = [threading.Thread(target=lambda k=k, f=f: out.__setitem__(k, f.read()))
               for k, f in (("out", p.stdout), ("err", p.stderr))]
    for r in readers:
        r.start()
    killer = threading.Timer(timeout, p.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(p.pid, 0)  # this child's own rusage, not every child's
    finally:
        killer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    for r in readers:
        r.join()
    return p.returncode, out["out"].decode(), out["err"].decode(), usage.ru_maxrss / 1024


@pytest.fixture(scope="module")
def decades(tmp_path_factory):
    return decades_trace(tmp_path_factory.mktemp("bounds") / "decades.pftrace")


def test_windows_are_capped_and_widened(decades):
    with open_trace(decades, engine="wasm") as tp:
        rep = run_checks(tp, decades, only=["input_stall", "cpu_contention"])
        n_is = tp.query("select count(*) as n, max(dur) as w from _tl_is_win").as_dicts()[0]
        n_cc = tp.query("select count(*) as n, max(dur) as w from _tl_cc_win").as_dicts()[0]
    for n in (n_is, n_cc):
        assert 0.9 * WINDOW_CAP <= n["n"] <= WINDOW_CAP, n  # capped, and the span still covered
        assert n["w"] >= SPAN_NS // WINDOW_CAP
    by = {r.check.id: r for r in rep.results}
    assert by["input_stall"].status == "error" and by["cpu_contention"].status == "error"
    for cid in ("input_stall", "cpu_contention"):
        notes = [f.message for f in by[cid].findings if "windows of 1 s" in f.message]
        assert len(notes) == 1, by[cid].findings
        need, have = (int(re.search(pat, notes[0]).group(1).replace(",", ""))
                      for pat in (r"would need ([\d,]+) windows", r"\(([\d,]+) of them\)"))
        assert need >= SPAN_NS // 10**9 and 0.9 * WINDOW_CAP <= have <= WINDOW_CAP, notes[0]
        worst = [f for f in by[cid].findings if f.message.startswith("worst window")]
        assert worst and all(f.dur >= SPAN_NS // WINDOW_CAP for f in worst)


def test_ordinary_windows_are_not_widened(tmp_path):
    # a span of a few ms keeps its 1 s window and says nothing about widening
    path = decades_trace(tmp_path / "t.pftrace")
    with open_trace(path, engine="wasm") as tp:
        tp.query("create perfetto table _span as select 0 as ts, 5000000000 as end_ts")
        from timeline.checks.runner import prelude_sql
        tp.query(prelude_sql())
        wins = tp.query("select ts, dur, win from _tl_windows!(_span, 1000000000)").rows
    assert wins == [(i * 10**9, 10**9, i) for i in range(5)]


def test_check_on_decades_is_bounded(decades):
    rc, out, err, rss_mib = run_measured([sys.executable, "-m", "timeline.cli", "check", "--format", "json",
                                          decades], timeout=60)
    assert rc == 0, err  # was: 83 s, 3.4 GB, then the engine crashed
    doc = json.loads(out)
    st = {c["id"]: c["status"] for c in doc["checks"]}
    assert st["input_stall"] == "error" and st["cpu_contention"] == "error" and "failed" not in st.values()
    assert rss_mib < 1024, rss_mib
