"""The sched checks' partials (timeline/checks/partials/_sched.py): the thread states and CPU slices
the converter's sched feed rebuilds equal trace_processor's `thread_state` and `sched` tables on the
same recording converted as one trace, row for row. Synthetic raw logs (tests/rawlog_factory.py),
the SQL through the wasm trace_processor."""
from __future__ import annotations

import pytest

from rawlog_factory import LogBuilder, T, end_block, scenario
from test_check_partials import converted, sql_findings
from test_gpu_convert import PID, GpuLog, us
from timeline import events as ev
from timeline.checks.partials._gpu import _fixed, _round
from timeline.checks.partials._sched import SchedColumns, state_name
from timeline.checks.traceset import FROM_INDEX, check_set
from timeline.checks.runner import prelude_sql
from timeline.converters import convert, trace_set
from timeline.converters.model import OUTSIDE_TID
from timeline.converters.trace_set import SplitSpec
from timeline.cuda import records as cuda_records
from timeline.cuda.probes import table_meta
from timeline.gpu import records as R
from timeline.identity import invoking_user
from timeline.trace_processor import TraceProcessorConfig, open_trace


def fed(tmp_path, raw, monkeypatch) -> SchedColumns:
    """A SchedColumns fed by a split conversion of `raw` (the converter's own taps)."""
    made = []
    real = trace_set.partial_collectors

    def with_sched(m):
        out = real(m)
        c = SchedColumns(m.thread_tgid)
        c.model, c.log_start = m, m.start_ts()
        made.append(c)
        return {**out, "_sched_test": c}
    real_add = trace_set.add_partials
    monkeypatch.setattr(trace_set, "partial_collectors", with_sched)
    monkeypatch.setattr(trace_set, "add_partials",
                        lambda doc, taps, starts: real_add(doc, {k: v for k, v in taps.items() if k[0] != "_"},
                                                           starts))
    convert(raw, str(tmp_path / "set.pftrace"), split=SplitSpec(duration_ns=50_000))
    return made[0]


def tables(path):
    """trace_processor's thread_state rows per tid (ts, dur, state, waker tid) and sched rows."""
    with open_trace(path, engine="wasm") as tp:
        st = tp.query("select t.tid, s.ts, s.dur, s.state, w.tid as waker from thread_state s "
                      "join thread t using (utid) left join thread w on w.utid = s.waker_utid "
                      "order by s.id").rows
        sched = tp.query("select s.cpu, s.ts, s.dur, t.tid from sched s join thread t using (utid) "
                         "order by s.cpu, s.ts, s.id").rows
        dups = tp.query("select tid from thread group by tid having count(*) > 1").rows
        start = tp.query("select trace_start()").rows[0][0]
    assert not dups  # one utid per tid: rows per tid are one thread's
    per: dict = {}
    for tid, ts, dur, state, waker in st:
        per.setdefault(tid, []).append((ts, dur, state, waker))
    return per, sched, start


def rebuilt(c: SchedColumns, tid):
    r = c.thread_states(tid)
    assert r is not None, tid
    return [(t, d, s, None if w < 0 else w) for t, d, s, w in
            zip(r["ts"].tolist(), r["dur"].tolist(), r["state"].tolist(), r["waker"].tolist())]


def busy_log(path) -> str:
    """Two processes on 3 CPUs: sleeps (S, D and S|D), wakings by other threads and by interrupts
    (idle), a preemption (R+) and its waking, a waking of a running and of a runnable thread, a
    migration, idle, an untracked hog, a fork of a thread and of a process, a lost switch record (the
    converter bridges the chain), odd states (0x101, 0x200), a thread on two CPUs at once, a waking
    at a CPU's first switch, sched in several blocks."""
    b = LogBuilder(ncpu=3)
    b.procs(T(1), [{"pid": 1000, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
                    "threads": [{"tid": 1000, "comm": "python3"}, {"tid": 1001, "comm": "pt_autograd_0"}]},
                   {"pid": 2000, "ppid": 1, "comm": "hog", "cmdline": ["hog"], "threads": [{"tid": 2000,
                                                                                            "comm": "hog"}]}])
    b.switch(T(5), 0, 0, 1000, prev_tracked=False)
    b.switch(T(6), 1, 0, 1001, prev_tracked=False)
    b.waking(T(7), 2, 0, 2000, 2)  # at CPU 2's first switch, which trace_processor drops: skipped too
    b.switch(T(7), 2, 0, 2000, prev_tracked=False)
    b.switch(T(20), 0, 1000, 0, prev_state=1, next_tracked=False)          # 1000 sleeps (S)
    b.waking(T(30), 1, 1001, 1000, 0)                                      # woken by 1001
    b.switch(T(40), 0, 0, 1000, prev_tracked=False)
    b.waking(T(45), 2, 2000, 1000, 0)                                      # of a running thread: ignored
    b.switch(T(50), 0, 1000, 77, prev_state=0x100, next_tracked=False)     # preempted by outside task (R+)
    b.waking(T(55), 1, 1001, 1000, 0)                                      # an R+ thread woken: R
    b.flush()
    b.switch(T(60), 1, 1001, 1000, prev_state=2)                            # 1000 migrates to CPU 1; 1001 D
    b.waking(T(65), 2, 2000, 1000, 1)                                      # running again: ignored
    b.switch(T(70), 0, 77, 0, next_tracked=False, prev_tracked=False)      # idle
    b.waking(T(75), 0, 0, 1001, 1)                                         # interrupt wakes 1001 (waker idle)
    b.waking(T(76), 0, 0, 1001, 1)                                         # of a runnable thread: ignored
    b.switch(T(80), 1, 1000, 1001, prev_state=0)                            # 1000 R (yield)
    b.switch(T(90), 0, 0, 1000, prev_tracked=False)
    b.fork(T(95), 0, 1000, 1000, 1002, 1000, "python3", "python3", thread=True)
    b.fork(T(96), 0, 1000, 1000, 3000, 3000, "python3", "python3")
    b.switch(T(100), 0, 1000, 1002, prev_state=3)                           # S|D
    b.switch(T(110), 2, 2000, 3000, prev_state=0x100)
    b.flush()
    b.switch(T(120), 1, 1001, 0, prev_state=0x101, next_tracked=False)
    b.switch(T(130), 0, 1002, 0, prev_state=1, next_tracked=False)
    b.waking(T(140), 0, 0, 1000, 2)
    b.switch(T(150), 2, 3000, 1000, prev_state=0x200)
    # CPU 1's record of a switch to 1002 is lost: this one's prev breaks the chain (idle -> 1002)
    b.switch(T(160), 1, 1002, 2000, prev_state=1)
    b.switch(T(170), 2, 1000, 0, prev_state=1, next_tracked=False)
    b.waking(T(180), 0, 2000, 1000, 0)
    b.switch(T(190), 0, 0, 1000, prev_tracked=False)
    # 1001 runs on CPUs 1 and 2 at once (a forced migration): its second switch-out finds it asleep
    # already (lost data: that S state stays open)
    b.switch(T(200), 1, 2000, 1001, prev_state=0x100)
    b.switch(T(210), 2, 0, 1001, prev_tracked=False)
    b.switch(T(220), 1, 1001, 0, prev_state=1, next_tracked=False)
    b.switch(T(230), 2, 1001, 0, prev_state=2, next_tracked=False)
    return b.write(path, end_block(stop_ts=T(300)))


@pytest.mark.parametrize("log", ["busy", "scenario"])
def test_thread_states_and_sched_are_trace_processors(tmp_path, monkeypatch, log):
    raw = busy_log(tmp_path / "run.tlraw") if log == "busy" else scenario(tmp_path / "run.tlraw")
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    want, sched, start = tables(one)
    c = fed(tmp_path, raw, monkeypatch)
    lo, hi = c.start_bounds()
    assert lo <= start <= hi
    assert set(want) - {0} <= set(c.model.threads) | {OUTSIDE_TID}
    for tid in sorted(set(want) | set(c.model.threads) | {0}):
        assert rebuilt(c, tid) == want.get(tid, []), tid
    got = c.sched_slices()
    assert list(zip(*(got[k].tolist() for k in ("cpu", "ts", "dur", "tid")))) == [tuple(r) for r in sched]
    for tid in want:
        assert c.run_ns(tid) == sum(d for _, _, d, t in sched if t == tid)
    if log == "busy":  # what the log is meant to hold
        states = {s for rows in want.values() for _, _, s, _ in rows}
        assert {"Running", "R", "R+", "S", "D", "SD", None} <= states, states
        assert (T(55), T(60) - T(55), "R", 1001) in want[1000]  # an R+ thread woken
        assert any(w == 0 for _, _, s, w in want[1001] if s == "R")  # woken by an interrupt
        assert (T(95), T(100) - T(95), "R", 1000) in want[1002]  # a fork opens R
        assert c.sched_slices()["cpu"].tolist().count(1) >= 3
        assert (T(220), -1, "S", None) in want[1001]  # lost data: left open
        assert want[2000][0][:3] == (T(7), T(110) - T(7), "Running")  # no R from the waking at T(7)


def test_state_names():
    assert [state_name(v) for v in (0, 1, 2, 3, 0x100, 0x101, 0x10, 0x20, 0x80, 0x200)] == \
        ["R", "S", "D", "SD", "R+", "S", "X", "Z", "I", None]


def test_same_time_events_of_a_thread_are_not_guessed(tmp_path, monkeypatch):
    """A waking and a switch of one thread at one time on two CPUs: trace_processor's sorter orders
    them, so no rows (the checks then run the SQL); the other threads' rows stay certain."""
    b = LogBuilder(ncpu=2)
    b.procs(T(1), [{"pid": 1000, "ppid": 1, "comm": "python3", "cmdline": ["python3"],
                    "threads": [{"tid": 1000, "comm": "python3"}, {"tid": 1001, "comm": "w"}]}])
    b.switch(T(5), 0, 0, 1000, prev_tracked=False)
    b.switch(T(6), 1, 0, 1001, prev_tracked=False)
    b.switch(T(10), 0, 1000, 0, prev_state=1, next_tracked=False)
    b.switch(T(20), 0, 0, 1000, prev_tracked=False)
    b.waking(T(20), 1, 1001, 1000, 0)
    b.switch(T(30), 1, 1001, 0, prev_state=1, next_tracked=False)
    raw = b.write(tmp_path / "run.tlraw", end_block(stop_ts=T(100)))
    c = fed(tmp_path, raw, monkeypatch)
    assert c.thread_states(1000) is None
    assert c.thread_states(1001)["state"].tolist() == ["Running", "S"]
    # a waking of 1001 at the time of a switch on its CPU in the next block: which ran then (its waker)
    # is the sorter's choice; in one block the switch comes first (test_thread_states_and_sched_...)
    b.flush()
    b.waking(T(50), 0, 0, 1001, 0)
    b.flush()
    b.switch(T(50), 0, 0, 1000, prev_tracked=False)
    b.switch(T(60), 0, 1000, 0, prev_state=1, next_tracked=False)
    raw = b.write(tmp_path / "run2.tlraw", end_block(stop_ts=T(100)))
    monkeypatch.undo()  # fed's patches, made again
    (tmp_path / "2").mkdir()
    c = fed(tmp_path / "2", raw, monkeypatch)
    assert c.thread_states(1001) is None
    assert c.thread_states(1000) is None  # (its T(20) waking still)


class SchedGpuLog(GpuLog):
    """GpuLog (the cuda family's calls, the gpu family's kernels) with the processes, threads, switches
    and wakings a test gives: `procs` as a procs snapshot's, `ops` [(LogBuilder method name, args...)]."""

    def __init__(self, procs, span_us=1_200_000):
        super().__init__(span_us=span_us)
        self.procs = procs
        self.ops: list[tuple] = []

    def builder(self):
        b = LogBuilder(ncpu=4, target_pid=PID)
        b.header["cuda"] = {"probes": table_meta(), "mode": "full"}
        for rid, dt, nm in ((cuda_records.RING_CUDA, cuda_records.CUDA_EVENT, "cuda"),
                            (R.RING_GPU, R.GPU_RECORD, "gpu")):
            b.header["rings"][str(rid)] = {"name": nm, "record_size": dt.itemsize, "stride": ev.ring_stride(dt)}
        b.procs(us(0), self.procs)
        for i, (op, *args) in enumerate(sorted(self.ops, key=lambda o: o[1])):
            getattr(b, op)(*args)
            if i % 50 == 49:
                b.flush()
        b.flush()
        b.blocks.append(("meta", {"type": "gpu_strings", "pid": PID,
                                  "strings": {str(k): v for k, v in self.strings.items()}}))
        return b


def proc(pid, *threads, comm="python3"):
    return {"pid": pid, "ppid": 1, "comm": comm, "cmdline": [comm],
            "threads": [{"tid": t, "comm": n} for t, n in threads]}


def picks_sql(path):
    with open_trace(path, engine="wasm") as tp:
        tp.query(prelude_sql())
        q = lambda sql: [tuple(r) for r in tp.query(sql).rows]  # noqa: E731
        return (q("select tid, name, why from tl_main_thread"), q("select tid, name from tl_backward_thread"),
                q("select ts, end_ts from tl_steady"), dict(q("select t.tid, r.run_ns from _tl_run r join thread t "
                                                               "using (utid)")))


@pytest.mark.parametrize("case", ["launches", "marker", "tied_launches", "none"])
def test_picks_are_the_preludes(tmp_path, monkeypatch, case):
    """tl_main_thread (the recorder's marker, else the most launches, ties to the first launcher; the
    training process' rules: None), tl_backward_thread (most launches, then run time) and tl_steady (start-up end to the
    last CUDA call) of the prelude, from the converter's feed."""
    # a python process gets the recorder's marker (the dataloader family); "trainer" none
    comm = "python3" if case == "marker" else "trainer"
    g = SchedGpuLog([proc(PID, (PID, comm), (1001, "worker"), (1002, "pt_autograd_0"), (1003, "pt_autograd_1"),
                          comm=comm)], span_us=4000)
    if case != "none":
        names = [g.string(i + 1, f"k{i}") for i in range(3)]
        t = 100
        for step in range(10):
            for i in range(3):
                g.corr += 1
                g.call("cudaLaunchKernel", us(t), 5000, args=(0x1000 + 16 * i,))
                g.rec(R.KERNEL, us(t + 3), us(t + 20), correlation=g.corr, device=0, stream=7, name=names[i])
                t += 30
        # the backward thread's launches: as many as the main thread's, or more (the marker outranks them)
        for k in range({"tied_launches": 30, "marker": 35}.get(case, 4)):
            g.call("cudaLaunchKernel", us(50 + 100 * k), 5000, tid=1002, args=(0x1000,))
    else:
        g.rec(R.KERNEL, us(3), us(20), correlation=1, device=0, stream=7, name=g.string(1, "k"))
    g.ops += [("switch", us(0), 0, 5, PID, 0, 120, False), ("switch", us(3000), 0, PID, 5, 1, 120, True, False),
              ("switch", us(1), 1, 6, 1001, 0, 120, False), ("switch", us(500), 1, 1001, 1002, 1),
              ("switch", us(600), 1, 1002, 1003, 1), ("switch", us(1000), 1, 1003, 1001, 1)]
    raw = g.write(tmp_path / "run.tlraw")
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    main, back, steady, run = picks_sql(one)
    c = fed(tmp_path, raw, monkeypatch)
    m = c.main_thread()
    for tid, ns in run.items():
        assert c.run_ns(tid) == ns, tid
    if case == "none":
        assert m is None and c.main_declined
        return
    if case == "tied_launches":  # as many launches: the thread that launched first, as the prelude picks
        assert [(m["tid"], m["name"], m["why"])] == main and m["tid"] == 1002, (m, main)
        return
    assert [(m["tid"], m["name"], m["why"])] == main
    assert main[0][2] == ("marked as the main training thread by the recorder" if case == "marker" else
                          "issues the most kernel launches")
    b = c.backward_thread(m)
    assert [(b["tid"], b["name"])] == back == [(1002, "pt_autograd_0")]  # the launches outrank run time
    assert run[1003] > run[1002]
    assert [c.steady(m)] == steady and steady[0][0] > us(100)  # after the start-up


# -- cpu_contention's partial: `timeline check SET --only cpu_contention` from the index gives the
# findings its SQL gives on the same recording converted as one trace

HOG, OUT, OUT2, BACK = 2000, 77, 88, 1002


def contention_log(case: str) -> SchedGpuLog:
    """Main thread 1000 on CPU 0 in periods of `period` us: it runs, is preempted (R+) by a hog of
    another process or by a task outside the recording, runs again, sleeps and is woken (a short R).
    contended: long preemptions (33% of the time it wants a CPU: error); calm: short ones (ok);
    storm: 100 us periods (10,000 switches/s). With `cuda`, it launches kernels (k4 first in the 6th
    period: the steady state starts there) and the backward thread pt_autograd_0 (CPU 1) waits 25%."""
    cuda = case in ("contended", "calm", "storm", "tied_markers", "params")
    comm = "trainer" if case == "no_main" else "python3"
    procs = [proc(PID, (PID, comm), (1001, "worker"), (BACK, "pt_autograd_0"), comm=comm),
             proc(HOG, (HOG, "hog"), comm="hog")]
    if case == "tied_markers":  # two training processes with a DataLoader worker each: equally long markers
        procs[0]["threads"] = procs[0]["threads"][:1]
        procs += [proc(1500, (1500, "python3")), {**proc(1600, (1600, "pt_data_worker"), comm="pt_data_worker"),
                                                  "ppid": PID},
                  {**proc(1700, (1700, "pt_data_worker"), comm="pt_data_worker"), "ppid": 1500}]
    # widen: 30 h (5 periods at the start, 5 at the end): more than WINDOW_CAP windows of 1 s
    late = 30 * 3600 * 1_000_000 if case == "widen" else 0
    g = SchedGpuLog(procs, span_us=400_000 + late)
    # no_cuda: 1.01 s, two windows of the SQL's 1 s
    period, n = (100, 2000) if case == "storm" else (1000, {"no_cuda": 1010, "widen": 10}.get(case, 300))
    steal = {"contended": (301, 353), "calm": (31, 43), "storm": (0, 0)}.get(case, (301, 353))
    names = [g.string(i + 1, f"k{i}") for i in range(5)]
    ops = g.ops
    base = 1000
    if case not in ("no_main", "no_cuda"):  # (no_cuda: the span starts at the first preemption, base + 400)
        ops.append(("switch", us(base - 10), 0, 5, PID, 0, 120, False))
    if case != "no_main":
        ops.append(("switch", us(base - 10), 1, 6, BACK, 0, 120, False))
    for k in range(n):
        t = base + k * period + (late if k >= 5 else 0)
        if case == "no_main":  # only tasks outside the recording ran
            ops += [("switch", us(t), 0, 0, OUT, 0, 120, False, False), ("switch", us(t + 500), 0, OUT, 0, 1, 120,
                                                                            False, False)]
            continue
        if cuda:
            for i in range(5 if k >= 5 else 4):
                g.corr += 1
                at = us(t + 2 + 3 * i)
                g.call("cudaLaunchKernel", at, 2000, args=(0x1000 + 16 * i,))
                g.rec(R.API, at + 100, at + 1900, tid=PID, correlation=g.corr, domain=211)
                g.rec(R.KERNEL, at + 3000, at + 5000, correlation=g.corr, device=0, stream=7, name=names[i])
        bw = 251 if case in ("contended", "no_cuda") else 21
        ops += [("switch", us(t + 500), 1, BACK, OUT2, 0x100, 120, True, False),
                ("switch", us(t + 500 + bw), 1, OUT2, BACK, 0, 120, False)]
        if case == "storm":
            ops += [("switch", us(t + 50), 0, PID, 0, 1, 120, True, False), ("waking", us(t + 80), 0, 0, PID, 0),
                    ("switch", us(t + 100), 0, 0, PID, 0, 120, False)]
            continue
        thief, back = (HOG, steal[0]) if k % 2 else (OUT, steal[1])
        pre = 400
        if k >= 1000:  # the last 10 ms: the worst, a window of its own (1 s after the span's start)
            pre, back = (300, 580) if k == 1000 else (250, 600)  # k == 1000: a wait across the windows' edge
        ops += [("switch", us(t + pre), 0, PID, thief, 0x100, 120, True, thief == HOG),
                ("switch", us(t + pre + back), 0, thief, PID, 0x100, 120, thief == HOG),
                ("switch", us(t + 900), 0, PID, OUT, 1, 120, True, False),
                ("waking", us(t + 950), 0, OUT, PID, 0),
                ("switch", us(t + 1000), 0, OUT, PID, 0, 120, False),
]
    if not cuda:
        g.rec(R.KERNEL, us(10), us(20), correlation=99_999, device=0, stream=7, name=names[0])
    return g


def cc_both_ways(tmp_path, g, params=None, split="5ms"):
    one, path, index = converted(tmp_path, g, split)
    status, want = sql_findings(one, "cpu_contention")
    got = check_set(path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=["cpu_contention"],
                    params=params, workers=1).results[0]
    return (status, want), got, index


@pytest.mark.parametrize("case", ["contended", "calm", "storm", "no_cuda", "no_main", "widen"])
def test_cpu_contention_partial_gives_the_sql_findings(tmp_path, case):
    """SQL on one trace vs partial+merge on a set of ~5 ms chunks: every finding, its severity, text
    (numbers as SQLite prints them), ts, dur and columns."""
    split = {"no_cuda": "50ms", "widen": "30000000ms"}.get(case, "5ms")
    (status, want), got, index = cc_both_ways(tmp_path, contention_log(case), split=split)
    assert "cpu_contention" in index.get("partials", {}), index.get("partials")
    assert len(index["chunks"]) > 3
    assert got.note == FROM_INDEX
    assert (got.status, got.findings) == (status, want)
    text = " | ".join(f.message for f in want)
    expected = {"contended": "error", "calm": "ok", "storm": "warning", "no_cuda": "error", "no_main": "n/a",
                "widen": "ok"}[case]
    assert status == expected, text
    if case in ("contended", "no_cuda"):
        assert "hog (tid 2000)" in text and "taken by tasks outside the recording" in text, text
        assert "worst window" in text
    if case == "no_cuda":  # the second window's share, not the whole span's
        worst = next(f for f in want if f.message.startswith("worst window"))
        assert want[0].ts == us(1400) and worst.ts == want[0].ts + 1_000_000_000 and worst.evidence["runnable_fraction"] > \
            want[0].evidence["runnable_fraction"], want
    if case in ("contended", "calm", "storm"):
        assert "steady state from +" in text and "backward thread pt_autograd_0" in text, text
    if case == "storm":
        assert "context-switch storm" in text, text
    if case == "widen":
        assert "would need 108,001 windows of 1 s: they are 1 s long instead (100,000 of them)" in text, text


@pytest.mark.parametrize("case", ["tied_markers", "params"])
def test_cpu_contention_falls_back_on_the_sql(tmp_path, case):
    """Two main-thread markers equally long (the SQL takes the first in its row order) or other
    parameters than the partial was made with: no partial, the SQL runs on the chunks."""
    params = {"cpu_contention": {"min_wait_us": 100}} if case == "params" else None
    (status, want), got, index = cc_both_ways(tmp_path, contention_log(case), params)
    assert got.note != FROM_INDEX
    if case == "params":
        assert "cpu_contention" in index.get("partials", {})
    else:
        assert "cpu_contention" not in index.get("partials", {})


def test_numbers_on_a_rounding_edge_print_as_sqlite_does(tmp_path):
    """trace_processor's SQLite prints and rounds the exact double, half away from zero: where 16
    significant digits would round the other way (0.045 is 0.04499..), _fixed/_round still agree."""
    vals = [0.045, 0.075, 0.015, 1.005, 2.675, 0.125, 0.005, 12.345, 0.0225, 0.3333, 2.5, 45.15e-3, 1e-9]
    raw = scenario(tmp_path / "run.tlraw")
    convert(raw, str(tmp_path / "one.pftrace"))
    with open_trace(str(tmp_path / "one.pftrace"), engine="wasm") as tp:
        sql = tp.query("select " + ", ".join(f"printf('%.2f', {v!r}), round({v!r}, 2)" for v in vals)).rows[0]
    assert [(_fixed(v, 2), _round(v, 2)) for v in vals] == list(zip(sql[::2], sql[1::2]))
    assert _fixed(0.045, 2) == "0.04" and _fixed(12.345, 2) == "12.35"


def test_no_sched_partial_past_max_rows(tmp_path, monkeypatch):
    """Past MAX_ROWS held switches and wakings the columns are dropped, no cpu_contention partial is
    written: the SQL runs."""
    from timeline.checks.partials import _sched
    monkeypatch.setattr(_sched, "MAX_ROWS", 500)
    (status, want), got, index = cc_both_ways(tmp_path, contention_log("calm"))
    assert "cpu_contention" not in index.get("partials", {})
    assert got.note != FROM_INDEX and status == "ok"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_sched_gives_trace_processors_rows(tmp_path, monkeypatch, seed):
    """Random switches and wakings on 3 CPUs (states R, R+, S, D; untracked tasks and idle; a thread
    now and then switched in on two CPUs at once, as after a lost record; wakings of threads in any
    state), in several blocks: every thread's rebuilt rows and the sched table equal trace_processor's."""
    import numpy as np
    rng = np.random.default_rng(seed)
    tids = [1000, 1001, 1002, 1003, 2000, 2001]
    b = LogBuilder(ncpu=3)
    b.procs(T(1), [proc(1000, *[(t, f"t{t}") for t in tids[:4]]), proc(2000, (2000, "a"), (2001, "b"), comm="hog")])
    running = {0: 0, 1: 0, 2: 0}
    t = 10
    for i in range(600):
        t += int(rng.integers(1, 40))
        cpu = int(rng.integers(0, 3))
        if rng.random() < 0.3:
            b.waking(T(t), cpu, running[cpu], int(rng.choice(tids)), cpu)
            continue
        nxt = int(rng.choice(tids + [0, 77]))
        prev = running[cpu]
        if nxt == prev:
            continue
        b.switch(T(t), cpu, prev, nxt, prev_state=int(rng.choice([0, 1, 2, 0x100])),
                 prev_tracked=prev in tids, next_tracked=nxt in tids)
        running[cpu] = nxt
        if i % 97 == 96:
            b.flush()
    raw = b.write(tmp_path / "run.tlraw", end_block(stop_ts=T(t + 100)))
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    want, sched, _ = tables(one)
    c = fed(tmp_path, raw, monkeypatch)
    certain = 0
    for tid in sorted(set(want) | set(tids)):
        got = c.thread_states(tid)
        if got is not None:
            certain += 1
            assert rebuilt(c, tid) == want.get(tid, []), tid
    assert certain >= 6
    got = c.sched_slices()
    assert list(zip(*(got[k].tolist() for k in ("cpu", "ts", "dur", "tid")))) == [tuple(r) for r in sched]


@pytest.mark.parametrize("seed", [4, 5])
def test_cpu_contention_partial_on_random_sched(tmp_path, seed):
    """Random switches and wakings (gaps up to 0.8 ms) of the main thread, hogs, the backward thread and
    tasks outside the recording on 2 CPUs: the index gives the SQL's findings."""
    import numpy as np
    rng = np.random.default_rng(seed)
    tids = [PID, BACK, HOG, 2001]
    g = SchedGpuLog([proc(PID, (PID, "python3"), (BACK, "pt_autograd_0")),
                     proc(HOG, (HOG, "hog"), (2001, "hog2"), comm="hog")], span_us=1_300_000)
    g.rec(R.KERNEL, us(10), us(20), correlation=1, device=0, stream=7, name=g.string(1, "k"))
    running = {0: 0, 1: 0}
    t = 100
    for i in range(3000):
        t += int(rng.integers(1, 800))
        cpu = int(rng.integers(0, 2))
        if rng.random() < 0.25:
            g.ops.append(("waking", us(t), cpu, running[cpu], int(rng.choice(tids)), cpu))
            continue
        nxt = int(rng.choice(tids + [0, OUT], p=[0.35, 0.1, 0.15, 0.1, 0.15, 0.15]))
        prev = running[cpu]
        if nxt == prev:
            continue
        g.ops.append(("switch", us(t), cpu, prev, nxt, int(rng.choice([0, 1, 2, 0x100])), 120, prev in tids,
                      nxt in tids))
        running[cpu] = nxt
    (status, want), got, index = cc_both_ways(tmp_path, g, split="50ms")
    assert t > 1_000_000  # two windows of 1 s
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    # the hogs' last slices are still open (dur -1) while the main thread waits: span_join's -1 ns pieces
    assert "the CPUs were meanwhile taken by" in want[0].message, want


def test_an_event_before_the_first_record_moves_the_start_bounds(tmp_path, monkeypatch):
    """trace_start() is the earliest event of the trace: the recorder's "library attached" slices can
    come before the log's first record (seen on a real recording: cpu_contention's "+0.04 s" where the
    one trace says "+0.05 s"). An async slice, an instant or a counter written earlier moves both
    bounds to it."""
    raw = busy_log(tmp_path / "run.tlraw")
    c = fed(tmp_path, raw, monkeypatch)
    lo, hi = c.start_bounds()
    c.async_slice("timeline: cuda probes", lo - 5000, 0, "libcudart.so.12", "timeline")
    assert c.start_bounds() == (lo - 5000, lo - 5000)
    c.instant(lo - 7000, 1000, 1000, "x", "timeline")
    c.counters("rss_bytes", [lo - 9000], [1.0], 1000)
    assert c.start_bounds() == (lo - 9000, lo - 9000)
