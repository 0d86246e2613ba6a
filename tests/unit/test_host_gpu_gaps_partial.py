"""host_gpu_gaps from a trace set's index (timeline/checks/partials/host_gpu_gaps.py): the same
findings as its SQL on the log converted as one trace."""
from __future__ import annotations

import pytest

from test_check_partials import converted, set_result, sql_findings, training_log
from test_gpu_convert import TID, WORKER, GpuLog, check_log, us
from timeline.sched_records import RING_SCHED
from timeline.checks.traceset import FROM_INDEX, NOT_MERGED

CHECK = "host_gpu_gaps"
PREEMPTED = 0x100  # prev_state's TASK_REPORT_MAX bit: switched out while runnable (R+)


class NappingLog(GpuLog):
    """check_log's host-bound run, but the feeding thread's scheduling is recorded only from 12 ms on
    (the idle stretches before: not judged), and it sleeps (S) from 20 to 30 ms (those stretches: not
    host-bound) and is preempted (R+) from 34 to 38 ms (still host-bound: runnable counts)."""

    def builder(self):
        b = super().builder()
        b._sched = []
        b.blocks = [x for x in b.blocks if not (x[0] == "ring" and x[1][0] == RING_SCHED)]  # GpuLog's switches out
        b.switch(us(12_000), 0, 5, TID, prev_tracked=False)
        b.switch(us(20_000), 0, TID, 5, prev_state=1, next_tracked=False)
        b.waking(us(30_000), 1, WORKER, TID, 0)
        b.switch(us(30_000) + 500, 0, 5, TID, prev_tracked=False)
        b.switch(us(34_000), 0, TID, 5, prev_state=PREEMPTED, next_tracked=False)
        b.switch(us(38_000), 0, 5, TID, prev_tracked=False)
        b.switch(us(self.span_us), 0, TID, 5, prev_state=1, next_tracked=False)
        b.flush()
        return b


def napping_log() -> GpuLog:
    g = check_log(True, steps=False)
    n = NappingLog(span_us=g.span_us)
    n.__dict__.update({k: v for k, v in g.__dict__.items() if k != "span_us"})
    return n


def blocking_log() -> GpuLog:
    """Steps of 5 short kernels, then ~1 ms of GPU idle: in every other step the thread spends 0.8 ms
    of it in cudaStreamSynchronize (blocked: not host-bound), in the others it runs on."""
    g = GpuLog()
    names = [g.string(i + 1, f"k{i}") for i in range(5)]
    t = 2000
    for step in range(40):
        for i in range(5):
            g.launch("cudaLaunchKernel", us(t), 5000, [(names[i], us(t + 3), us(t + 23))])
            t += 25
        if step % 2:
            g.call("cudaStreamSynchronize", us(t), 800_000)
        t += 1000
    return g


def both(tmp_path, g):
    one, path, index = converted(tmp_path, g, "3ms")
    return sql_findings(one, CHECK), set_result(path, CHECK), index


@pytest.mark.parametrize("case", ["host", "gpu", "copies", "startup", "napping", "blocking"])
def test_partial_gives_the_sql_findings(tmp_path, case):
    """Host-bound (error: the GPU idles while its feeding thread runs), GPU-bound (ok), with copies,
    with a start-up (its own line), with the feeding thread's states partly unrecorded, asleep and
    runnable, and with half the idle stretches spent in a sync call: severity, text, ts/dur and every
    column as the SQL gives them."""
    g = {"host": lambda: check_log(True, steps=False), "gpu": lambda: check_log(False, steps=False),
         "copies": lambda: check_log(True, steps=False, copies=True),
         "startup": lambda: training_log(slow={(0, 0): 10_000, (20, 0): 2000}, warmup_us=20_000),
         "napping": napping_log, "blocking": blocking_log}[case]()
    (status, want), got, index = both(tmp_path, g)
    assert CHECK in index.get("partials", {}) and len(index["chunks"]) > 3
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    assert status == {"gpu": "ok", "napping": "warning"}.get(case, "error"), want
    texts = [f.message for f in want]
    assert any(t.startswith("start-up of python3") for t in texts) == (case == "startup"), texts
    assert sum(t.startswith("GPU idle for") for t in texts) == (0 if case == "gpu" else 3), texts
    if case == "blocking":
        assert want[0].evidence["gaps"] == 20, want
    if case == "napping":
        assert "more stretches" in texts[0] and "not judged" in texts[0], texts
        (tmp_path / "x").mkdir()
        (full,) = [f for f in sql_findings(converted(tmp_path / "x", check_log(True, steps=False), "3ms")[0],
                                           CHECK)[1] if f.message.startswith("GPU 0")]
        assert want[0].evidence["gaps"] < full.evidence["gaps"], (want[0], full)


def test_threads_tied_for_a_devices_work_run_the_sql(tmp_path):
    """Two threads of the process launch as many kernels each onto GPU 0: the SQL's owner is the lower
    utid (trace_processor's numbering), so no partial; another parameter too runs the SQL."""
    g = GpuLog()
    name = g.string(1, "k")
    t = 2000
    for i in range(40):
        g.launch("cudaLaunchKernel", us(t), 5000, [(name, us(t + 10), us(t + 30))], tid=TID if i % 2 else WORKER)
        t += 400
    (status, want), got, index = both(tmp_path, g)
    assert CHECK not in index.get("partials", {}) and "gpu_queue_delay" in index["partials"]
    assert got.note == NOT_MERGED
    (tmp_path / "p").mkdir()
    one, path, index = converted(tmp_path / "p", check_log(True, steps=False), "3ms")
    from timeline.checks.traceset import check_set
    from timeline.identity import invoking_user
    from timeline.trace_processor import TraceProcessorConfig
    res = check_set(path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=[CHECK], workers=1,
                    params={CHECK: {"min_idle_us": 300}}).results[0]
    assert res.note == NOT_MERGED


# -- without GPU activity: gaps between a process' submissions

class NoGpuLog(GpuLog):
    """GpuLog with CUDA calls only; `naps`: (start, end) us where the submitting thread sleeps (S);
    `sched_from`: its scheduling recorded only from then on (us)."""

    def __init__(self, span_us, naps=(), sched_from=0):
        super().__init__(span_us=span_us)
        self.naps, self.sched_from = naps, sched_from

    def builder(self):
        b = super().builder()
        if not self.naps and not self.sched_from:
            return b
        b._sched = []
        b.blocks = [x for x in b.blocks if not (x[0] == "ring" and x[1][0] == RING_SCHED)]
        b.switch(us(self.sched_from), 0, 5, TID, prev_tracked=False)
        for a, e in self.naps:
            b.switch(us(a), 0, TID, 5, prev_state=1, next_tracked=False)
            b.switch(us(e), 0, 5, TID, prev_tracked=False)
        b.switch(us(self.span_us), 0, TID, 5, prev_state=1, next_tracked=False)
        b.switch(us(10), 1, 6, WORKER, prev_state=1, prev_tracked=False)
        b.switch(us(self.span_us), 1, WORKER, 6, prev_state=1, next_tracked=False)
        b.flush()
        return b


def submissions_log(steps=60, warmup_us=0, naps=(), sched_from=0, blocked_every=2, tie=False) -> NoGpuLog:
    """A process launching 5 kernels (each its own function pointer) at the start of each 8 ms step, then
    ~7.9 ms without submissions; in every `blocked_every`-th step 6 ms of it in cudaStreamSynchronize
    (blocked: not host-bound). warmup_us: a pause before k4's first launch (a start-up); tie: two
    submissions at the same ts once (lead()'s order would decide)."""
    g = NoGpuLog(span_us=2000 + warmup_us + steps * 8000 + 20_000, naps=naps, sched_from=sched_from)
    g.call("cudaMalloc", us(1000), 50_000)
    t = 2000
    for step in range(steps):
        for i in range(5):
            if step == 0 and i == 4:
                t += warmup_us
            g.call("cudaLaunchKernel", us(t + 20 * i), 10_000, args=(0x1000 + 16 * i,))
        if tie and step == 7:
            g.call("cudaMemcpyAsync", us(t + 80), 3_000)
        if blocked_every and step % blocked_every == blocked_every - 1:
            g.call("cudaStreamSynchronize", us(t + 200), 6_000_000)
        t += 8000
    return g


def both_nogpu(tmp_path, g, split="50ms"):
    one, path, index = converted(tmp_path, g, split)
    return sql_findings(one, CHECK), set_result(path, CHECK), index


@pytest.mark.parametrize("case", ["host", "startup", "napping", "unrecorded", "all_host", "none_host"])
def test_without_gpu_activity_the_partial_gives_the_sql_findings(tmp_path, case):
    """No gpu family: the per-process row on the gaps between submissions (half of them blocked in a
    sync), with a start-up (its own line; its gaps left out of the totals), the thread asleep in some
    gaps (not host-bound), its states unrecorded early on (not judged), every gap host-bound (detail
    rows), none: severity, text, ts/dur and every column as the SQL gives them, over 12 chunks."""
    g = {"host": lambda: submissions_log(),
         "startup": lambda: submissions_log(warmup_us=30_000),
         "napping": lambda: submissions_log(naps=[(100_000, 200_000)]),
         "unrecorded": lambda: submissions_log(sched_from=150_000),
         "all_host": lambda: submissions_log(blocked_every=0),
         "none_host": lambda: submissions_log(blocked_every=1)}[case]()
    (status, want), got, index = both_nogpu(tmp_path, g)
    assert CHECK in index.get("partials", {}) and len(index["chunks"]) > 5
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    texts = [f.message for f in want]
    assert texts and texts[0].startswith("python3 (pid 1000): "), texts
    assert any(t.startswith("start-up of python3") for t in texts) == (case == "startup"), texts
    assert ("not judged" in texts[0]) == (case == "unrecorded"), texts
    assert sum(t.startswith("GPU idle for") for t in texts) == (3 if status in ("warning", "error") else 0), texts
    gaps = want[0].evidence.get("gaps", 0)
    assert gaps == {"all_host": 59, "none_host": 0}.get(case, gaps) and (gaps > 0) == (case != "none_host"), want


def test_without_gpu_activity_no_partial_where_the_sql_order_decides(tmp_path):
    """Two submissions at the same ts (lead()'s row order picks the next one), and two processes
    submitting (listed in trace_processor's process order): no partial, the SQL runs, same findings."""
    (status, want), got, index = both_nogpu(tmp_path, submissions_log(steps=20, tie=True), "100ms")
    assert CHECK not in index.get("partials", {}) and got.note == NOT_MERGED
    g = submissions_log(steps=20)
    g.calls[-1]["tgid"] = WORKER  # a sync of another process
    g.calls[-1]["tid"] = WORKER
    g.call("cudaLaunchKernel", us(5000), 10_000, tid=WORKER, args=(0x1000,))
    g.calls[-1]["tgid"] = WORKER
    (tmp_path / "two").mkdir()
    _, _, index = both_nogpu(tmp_path / "two", g, "100ms")
    assert CHECK not in index.get("partials", {})


def test_nvml_counters_beside_submissions_run_the_sql():
    """NVML utilization counters are the SQL's other judge without GPU activity: no partial."""
    from timeline.checks.partials import host_gpu_gaps
    from timeline.checks.partials._gpu import GpuColumns
    from timeline.checks.partials._sched import SchedColumns
    cols = GpuColumns()
    cols.log_start = 0
    cols.counters("gpu0.utilization_pct", [1], [5.0])
    assert host_gpu_gaps.part((cols, SchedColumns()), [0]) is None
    cols.nvml = False
    assert host_gpu_gaps.part((cols, SchedColumns()), [0]) is not None
