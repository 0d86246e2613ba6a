"""launch_latency's partial (timeline/checks/partials/launch_latency.py): written into a trace set's index
by the converter and merged by `timeline check SET` without trace_processor, it gives the findings its SQL
gives on the same recording converted as one trace. Synthetic raw logs with the cuda family's launch calls
alone (what `-e cuda` records: no GPU work, no scheduling unless asked), converted both ways through the
real converter (test_check_partials.both_ways); the SQL through the wasm trace_processor."""
from __future__ import annotations

import pytest

from test_check_partials import StackedGpuLog, both_ways, converted, set_result, sql_findings
from test_gpu_convert import TID, WORKER, us
from timeline import sched_records
from timeline.checks.traceset import FROM_INDEX, NOT_MERGED

CHECK = "launch_latency"
# kernel i's launch function and function pointer: kernels 0 and 2 share one (one kernel to the SQL's
# first-launch rule, launched through cudaLaunchKernel and its _ptsz variant: one function once stripped)
FNS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernel_ptsz", "cuLaunchKernel_ptsz", "cudaLaunchKernelExC")
FUNC = (0x1000, 0x2000, 0x1000, 0x4000, 0x5000)
LATE = 0x9000


class LaunchLog(StackedGpuLog):
    """StackedGpuLog without GPU work, and without its scheduling records unless `sched`: then the main
    thread runs on CPU 0 from the start to the end (the worker on CPU 1) but for the spans `off_cpu`
    adds."""

    def __init__(self, sched=False):
        super().__init__()
        self.sched = sched
        self.away: list[tuple] = []  # (from us, to us, prev_state: 0 preempted, else asleep)
        self.at: dict = {}           # (step, i) -> when launch_log launched it (us)

    def off_cpu(self, start_us, end_us, state, wake_us=2):
        """The main thread off CPU 0 over [start, end): preempted by an untracked task (state 0: R) or
        asleep (1: S, 2: D) until woken (on CPU 1) wake_us before its end."""
        self.away.append((start_us, end_us, state, wake_us))

    def builder(self):
        b = super().builder()
        b.blocks = [x for x in b.blocks if not (x[0] == "ring" and x[1][0] == sched_records.RING_SCHED)]
        if not self.sched:
            b.header["events"] = ["proc"]
            return b
        b.switch(us(0), 0, 5, TID, prev_tracked=False)
        b.switch(us(10), 1, 6, WORKER, prev_state=1, prev_tracked=False)
        for start, end, state, wake in sorted(self.away):
            b.switch(us(start), 0, TID, 7 if state == 0 else 0, prev_state=state, next_tracked=False)
            if state:
                b.waking(us(end - wake), 1, WORKER, TID, 0)
            b.switch(us(end), 0, 7 if state == 0 else 0, TID, prev_tracked=False)
        b.switch(us(self.span_us), 0, TID, 5, prev_state=1, next_tracked=False)
        b.switch(us(self.span_us), 1, WORKER, 6, prev_state=1, next_tracked=False)
        b.flush()
        return b


def launch_log(steps=40, slow=None, stacks=None, late=None, entry_only=False, sched=False, same_ts=False,
               lead=True) -> LaunchLog:
    """One process launching kernels 0..4 once per step through FNS[i] (kernel 3 from the worker thread),
    4 to 5 us each (no two alike), 30 us apart after the end of the one before. slow: {(step, i): us}; stacks: {(step, i): "A" or "B"},
    the Python stack taken at that launch; late: {step: us}, a kernel first launched at that step (in the
    second half: not start-up) and at every later one; entry_only: every launch without a duration (the
    cuda family's entry-only mode); same_ts: the worker launches kernel 0 at the same time as its first
    launch by the main thread; lead: a synchronize call first (else the log's first record is a launch)."""
    g = LaunchLog(sched)
    # the log's first record: the recorder's main-thread marker starts there (a launch starting with it
    # is nested as trace_processor's sorter likes)
    if lead:
        g.call("cudaStreamSynchronize", us(1000), 3000)
    t = 2000.0
    first_late = min(late) if late else None
    for step in range(steps):
        for i in range(5):
            dur = int((slow or {}).get((step, i), 0) * 1000) or 4000 + ((step * 5 + i) * 37) % 1000
            tid = WORKER if i == 3 else TID
            g.at[step, i] = t
            g.call(FNS[i], us(t), 0 if entry_only else dur, tid=tid, args=(FUNC[i], FUNC[i]))
            if entry_only:
                g.calls[-1]["flags"] = 0
            if (step, i) in (stacks or {}):
                g.stacked[us(t)] = (stacks[step, i], FNS[i], tid)
            if same_ts and step == 0 and i == 0:
                g.call(FNS[0], us(t), dur + 500, tid=WORKER, args=(FUNC[0], FUNC[0]))
            t += 30 + dur // 1000  # one call at a time on a thread: slices nest (trace_processor mends others)
        if first_late is not None and step >= first_late:
            dur = int(late.get(step, 0) * 1000) or 4321 + step
            g.call("cuLaunchKernel", us(t), dur, args=(LATE, LATE))
            t += dur // 1000
        t += 200
    g.span_us = int(t) + 1000
    return g


def check_both_ways(tmp_path, g, split="1ms"):
    """(SQL status, its findings, the set's result, the set's index), the partial asserted written."""
    (status, want), got, index, _ = both_ways(tmp_path, g, split, check=CHECK)
    assert CHECK in index.get("partials", {}), index.get("partials")
    return status, want, got, index


OUTLIERS = {(10, 0): 900, (15, 1): 700, (20, 2): 650, (25, 3): 300, (30, 1): 2000}


@pytest.mark.parametrize("case", ["outliers", "startup_and_first", "python_lines", "none_slow"])
def test_partial_gives_the_sql_findings(tmp_path, case):
    """SQL on one trace vs partial+merge on a set of ~1 ms chunks (over a dozen): outliers of several
    functions (p99 20x the median: error; the _ptsz variants counted under their
    function; the worker's launch named by its thread; the worst-3 list cut; cudaLaunchKernelExC without
    outliers: ok); slow launches in the start-up and a kernel's first launch after it (left out: all ok);
    Python stacks at some launches (the outliers name the line most came from); nothing slow (ok rows).
    Start-up: up to kernel 4's first launch, the last of step 0; kernel 2's launch there is the second of its
    function pointer (kernel 0's): left out as start-up only. The late kernel's first launch is its first only."""
    slow = {"outliers": OUTLIERS, "startup_and_first": {(0, 2): 3000}, "python_lines": OUTLIERS,
            "none_slow": {}}[case]
    late = {25: 5000} if case == "startup_and_first" else None
    stacks = {(10, 0): "A", (20, 2): "B", (30, 1): "A", (15, 1): "A", (3, 1): "B"} if case == "python_lines" else None
    status, want, got, index = check_both_ways(tmp_path, launch_log(slow=slow, stacks=stacks, late=late))
    assert len(index["chunks"]) > 10
    assert got.note == FROM_INDEX  # no trace_processor for it
    assert (got.status, got.findings) == (status, want)
    assert status == {"outliers": "error", "startup_and_first": "ok", "python_lines": "error",
                      "none_slow": "ok"}[case], want
    verdicts = {f.evidence["function"]: f for f in want if f.severity in ("error", "warning", "ok")}
    if case in ("outliers", "python_lines"):
        assert {k: (f.severity, f.evidence["outliers"]) for k, f in verdicts.items()} == {
            "cudaLaunchKernel": ("error", 2), "cuLaunchKernel": ("error", 3), "cudaLaunchKernelExC": ("ok", 0)}
        info = [f for f in want if f.severity == "info"]
        assert [f.evidence["max_us"] for f in info] == [2000, 900, 700]
        assert all("thread state not recorded" in f.message and f.hint is None for f in info), info
    if case == "outliers":
        assert "on worker (tid 1001)" not in str(want)  # the worker's 300 us launch is cut from the list
    if case == "python_lines":
        assert verdicts["cuLaunchKernel"].evidence["python_line"] == "train.py:12 inner"
        assert verdicts["cuLaunchKernel"].evidence["python_share"] == 1.0
        assert verdicts["cudaLaunchKernel"].evidence["python_share"] == 0.5  # A and B, one each: the first line
        assert [f.evidence.get("python_line") for f in want if f.severity == "info"] == \
            ["train.py:12 inner", "train.py:12 inner", "train.py:12 inner"]
    if case == "startup_and_first":
        # every launch with a duration (5 a step, the late kernel's 15) less step 0's 5 (start-up or a first)
        # and the late kernel's first
        assert sum(f.evidence["launches"] for f in verdicts.values()) == 5 * 40 + 15 - 6
        assert all(f.evidence["max_us"] < 100 for f in verdicts.values()), want


def test_one_chunk_or_dozens(tmp_path):
    """One chunk or dozens (1 ms each): the same findings as the single trace's SQL, the worker's
    launch among the worst (named by its thread); one outlier in 150 cudaLaunchKernel launches leaves
    its p99 at the median: warning, not error."""
    slow = {(10, 0): 900, (15, 1): 700, (70, 3): 800, (45, 4): 1200}
    g = launch_log(steps=80, slow=slow)
    for split in ("2000ms", "1ms"):
        d = tmp_path / split
        d.mkdir()
        status, want, got, index = check_both_ways(d, g, split)
        assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want), split
        assert len(index["chunks"]) == 1 if split == "2000ms" else len(index["chunks"]) > 24
        assert any("on worker (tid 1001)" in f.message for f in want), want
        assert [f.severity for f in want if f.evidence.get("function") == "cudaLaunchKernel"][0] == "warning"


@pytest.mark.parametrize("case", ["entry_only", "no_launch"])
def test_na_both_ways(tmp_path, case):
    """Launches without durations (entry-only probes) and CUDA calls without any launch: n/a, with the
    SQL's text for each, from the index."""
    if case == "entry_only":
        g = launch_log(steps=10, entry_only=True)
    else:
        g = LaunchLog()
        for k in range(20):
            g.call("cudaStreamSynchronize", us(2000 + 100 * k), 5000)
        g.span_us = 5000
    status, want, got, _ = check_both_ways(tmp_path, g)
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    assert status == "n/a" and len(want) == 1
    assert ("without durations" in want[0].message) == (case == "entry_only"), want


def test_ties_run_the_sql(tmp_path):
    """Where the SQL's answer hangs on its row order, its own: two outliers of equal duration at the
    worst-3 cut (the merge declines), two launches of a kernel at its first instant (no partial)."""
    slow = {(10, 0): 900, (15, 1): 700, (20, 2): 650, (25, 4): 650}
    (tmp_path / "cut").mkdir()
    (_, want), got, index, _ = both_ways(tmp_path / "cut", launch_log(slow=slow), "1ms", check=CHECK)
    assert CHECK in index["partials"] and got.note == NOT_MERGED
    assert sorted(f.evidence["max_us"] for f in want if f.severity == "info") == [650, 700, 900]
    (tmp_path / "first").mkdir()
    _, path, index = converted(tmp_path / "first", launch_log(slow={(10, 0): 900}, same_ts=True), "1ms")
    assert CHECK not in index.get("partials", {})
    assert set_result(path, CHECK).note == NOT_MERGED


def test_a_thread_the_recording_never_named_runs_the_sql(tmp_path):
    """A worst launch from a thread without a name in the recording (not in its process snapshot, no
    fork seen): its name in the trace is trace_processor's to give, so the merge declines."""
    g = launch_log(slow={(10, 0): 900})
    g.call("cudaLaunchKernel", us(g.span_us), 3_000_000, tid=1002, args=(FUNC[0], FUNC[0]))
    g.span_us += 5000
    (_, want), got, index, _ = both_ways(tmp_path, g, "1ms", check=CHECK)
    assert CHECK in index["partials"] and got.note == NOT_MERGED
    assert any("(tid 1002)" in f.message for f in want), want


def test_thread_states_of_the_worst_launches(tmp_path):
    """With scheduling records: the main thread preempted for half of the worst launch (runnable: it
    lost its CPU), asleep (S) for 2/3 of the second, in D for 1/5 of the third, running through the
    others. The fractions, the hints and the worker's states come from the index as the SQL's span join
    over thread_state gives them."""
    g = launch_log(slow=OUTLIERS, sched=True)
    g.off_cpu(g.at[30, 1] + 500, g.at[30, 1] + 1500, 0)
    g.off_cpu(g.at[10, 0] + 100, g.at[10, 0] + 700, 1)
    g.off_cpu(g.at[15, 1] + 100, g.at[15, 1] + 240, 2)
    status, want, got, index = check_both_ways(tmp_path, g)
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    info = [f for f in want if f.severity == "info"]
    assert [(f.evidence["max_us"], f.evidence["running_fraction"]) for f in info] == [
        (2000, 0.5), (900, 0.333), (700, 0.8)], info
    assert info[0].evidence["runnable_fraction"] == 0.5 and "lost its CPU" in info[0].hint
    assert "sleeping/blocked 66%" in info[1].message and "driver blocked" in info[1].hint
    assert "sleeping/blocked 20%" in info[2].message and "burned CPU" in info[2].hint


def test_thread_states_not_certain_run_the_sql(tmp_path):
    """The main thread woken (on CPU 1) at the very time it is switched in on CPU 0 during a listed
    launch: which comes first is trace_processor's sorter's choice, so the merge declines."""
    g = launch_log(slow=OUTLIERS, sched=True)
    g.off_cpu(g.at[10, 0] + 100, g.at[10, 0] + 700, 1, wake_us=0)
    (_, want), got, index, _ = both_ways(tmp_path, g, "1ms", check=CHECK)
    assert CHECK in index["partials"] and got.note == NOT_MERGED
    assert len([f for f in want if f.severity == "info"]) == 3


def test_no_partial_past_max_rows(tmp_path, monkeypatch):
    """Past MAX_ROWS held rows (switches, wakings, forks, launches) _sched.py drops them: no partial,
    the SQL runs."""
    from timeline.checks.partials import _sched
    monkeypatch.setattr(_sched, "MAX_ROWS", 150)
    _, path, index = converted(tmp_path, launch_log(slow={(10, 0): 900}), "1ms")
    assert CHECK not in index.get("partials", {})
    assert set_result(path, CHECK).note == NOT_MERGED


@pytest.mark.parametrize("case", ["crossing", "same_start", "end_at_start"])
def test_launches_trace_processor_may_nest_otherwise_run_the_sql(tmp_path, case):
    """Another slice on a launch's thread that trace_processor's begin/end stack would pair with it
    otherwise than written: one that starts before a launch and ends inside it (the end closes the
    launch), one starting at the same time with another end, one ending when the launch starts (the
    sorter's order): no partial. (The synthetic 8-GPU node's NVTX steps start with a launch now and
    then: that is how the benchmark found it.)"""
    g = launch_log(slow=OUTLIERS)
    t = g.at[20, 4]  # a 4-5 us launch
    start, dur = {"crossing": (t - 1, 3000), "same_start": (t, 30_000), "end_at_start": (t - 5, 5000)}[case]
    g.call("cudaStreamSynchronize", us(start), dur)
    _, path, index = converted(tmp_path, g, "1ms")
    assert CHECK not in index.get("partials", {})
    assert set_result(path, CHECK).note == NOT_MERGED


@pytest.mark.parametrize("case", ["marker_at_first_launch", "end_at_first_launch"])
def test_a_launch_left_out_needs_only_a_duration(tmp_path, case):
    """The log's first record a launch: the recorder's main-thread marker starts with it. That launch is
    left out (its kernel's first), whatever duration trace_processor gives it: the partial is written,
    with the SQL's findings. A slice ending as it starts could close it at once (no duration: then
    another launch would be its kernel's first): no partial."""
    g = launch_log(slow=OUTLIERS, lead=False)
    if case == "end_at_first_launch":
        g.call("cudaStreamSynchronize", us(g.at[0, 0] - 5), 5000)
    one, path, index = converted(tmp_path, g, "1ms")
    if case == "end_at_first_launch":
        assert CHECK not in index.get("partials", {})
        return
    status, want = sql_findings(one, CHECK)
    got = set_result(path, CHECK)
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want) and status == "error"
