"""The sched checks' partials (timeline/checks/partials/_sched.py): the thread states and CPU slices
the converter's sched feed rebuilds equal trace_processor's `thread_state` and `sched` tables on the
same recording converted as one trace, row for row. Synthetic raw logs (tests/rawlog_factory.py),
the SQL through the wasm trace_processor."""
from __future__ import annotations

import pytest

from rawlog_factory import LogBuilder, T, end_block, scenario
from test_gpu_convert import PID, GpuLog, us
from timeline import events as ev
from timeline.checks.partials._sched import SchedColumns, state_name
from timeline.checks.runner import prelude_sql
from timeline.converters import convert, trace_set
from timeline.converters.model import OUTSIDE_TID
from timeline.converters.trace_set import SplitSpec
from timeline.cuda import records as cuda_records
from timeline.cuda.probes import table_meta
from timeline.gpu import records as R
from timeline.trace_processor import open_trace


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
    assert not dups  # one utid per tid: rows per tid are one thread's
    per: dict = {}
    for tid, ts, dur, state, waker in st:
        per.setdefault(tid, []).append((ts, dur, state, waker))
    return per, sched


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
    want, sched = tables(one)
    c = fed(tmp_path, raw, monkeypatch)
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
    """tl_main_thread (the recorder's marker, else the most launches; ties and the training process'
    rules: None), tl_backward_thread (most launches, then run time) and tl_steady (start-up end to the
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
    if case in ("tied_launches", "none"):
        assert m is None and c.main_declined
        return
    assert [(m["tid"], m["name"], m["why"])] == main
    assert main[0][2] == ("marked as the main training thread by the recorder" if case == "marker" else
                          "issues the most kernel launches")
    b = c.backward_thread(m)
    assert [(b["tid"], b["name"])] == back == [(1002, "pt_autograd_0")]  # the launches outrank run time
    assert run[1003] > run[1002]
    assert [c.steady(m)] == steady and steady[0][0] > us(100)  # after the start-up
