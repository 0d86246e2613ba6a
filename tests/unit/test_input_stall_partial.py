"""input_stall's partial (timeline/checks/partials/input_stall.py): a recording converted once as one
trace (the check's SQL through the wasm trace_processor) and once as a trace set (the converter's
partial in its index, merged by `timeline check SET` without trace_processor) gives the same status
and findings. Synthetic raw logs: a training process whose main thread sleeps until a DataLoader
worker process wakes it, the workers' main threads in a chosen state meanwhile, the pystack
family's `wait` slices on the main thread."""
from __future__ import annotations

import json

import pytest

from rawlog_factory import BOOT0, LogBuilder, end_block
from test_check_partials import sql_findings
from test_pystack_convert import FRAMES, py_events
from timeline import events as ev
from timeline.checks.traceset import FROM_INDEX, NOT_MERGED, check_set
from timeline.converters import convert
from timeline.converters.trace_set import SplitSpec
from timeline.identity import invoking_user
from timeline.pystack import probes
from timeline.pystack import records as PY
from timeline.trace_processor import TraceProcessorConfig

CHECK = "input_stall"
MAIN, PIN, OTHER = 1000, 1001, 1002
TWIN, TWIN_WORKER = 2000, 2100
WORKERS = (1100, 1101)
IDLE, STRANGER = 0, 77                  # idle, an untracked task that preempts a worker
PREV_STATE = {"disk": 2, "sleeping": 1}  # TASK_UNINTERRUPTIBLE, TASK_INTERRUPTIBLE
# stacks the main thread waits in: innermost frame first (FRAMES: 0 train.py:12 inner, 1 train.py:57 step,
# 2 train.py:90 main, 3 train.py:95 <module>, 4 data.py:7 load)
STACKS = {"A": (0xA, [4, 2, 3]), "B": (0xB, [0, 1, 2, 3]), "C": (0xC, [1, 2, 3]), "D": (0xD, [2, 3])}
UNSENT = 0xEE  # a stack id never sent: the slice's `py` is "?" (no line)


def us(x: float) -> int:
    return BOOT0 + int(round(x * 1000))


def stall_log(waits, mode="disk", run_us=400.0, wakers=None, py=None, workers=WORKERS, worker_comm=None,
              main_state=1, tail_us=0.0, start="fork"):
    """A training process MAIN (CPU 0) with the DataLoader worker processes `workers` (CPUs 1..),
    forked by it and renamed pt_data_worker (worker_comm: forked with that comm, no rename), and
    a pin-memory thread PIN. start: "fork" (MAIN launched), "twins" (MAIN and TWIN, a second
    training process with a worker of its own, both there when the recording starts: two main
    threads marked alike), "workers_only" (attached to the workers alone: no MAIN, no parent). Step k: MAIN runs run_us, then sleeps (main_state) waits[k] us until
    wakers[k] wakes it ("worker": the first worker's main thread, "pin": PIN, "other": OTHER, a
    thread of its own, each running on CPU 0 for it; "idle": an interrupt; default "worker"). Each worker runs the first half of MAIN's run, then is
    `mode` (disk, sleeping: switched out so; runnable: preempted by an untracked task; running)
    until 30 us before the step ends, then runs (the first worker wakes MAIN 5 us before it).
    py: step -> a key of STACKS (or "?"): a pystack `wait` slice over MAIN's sleep in that stack
    (a tuple: several, each (key, start offset us, length us) within the sleep). tail_us: the first
    worker runs 50 us once more that long after the last step (a longer DataLoader run)."""
    b = LogBuilder(ncpu=1 + len(workers), mode="launch" if start == "fork" else "attach")
    main = start != "workers_only"
    if start == "fork":
        b.fork(us(1), 0, 999, 999, MAIN, MAIN, "python3", "timeline", launched=True)
        b.exec(us(2), 0, MAIN, "python3", ["python3", "train.py"])
    elif start == "twins":
        b.procs(us(0), [{"pid": pid, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
                         "threads": [{"tid": pid, "comm": "python3"}]} for pid in (MAIN, TWIN)])
        b.fork(us(8), 0, TWIN, TWIN, TWIN_WORKER, TWIN_WORKER, "python3", "python3")
        b.rename(us(9), 0, TWIN_WORKER, TWIN_WORKER, "python3", "pt_data_worker")
    else:
        b.procs(us(0), [{"pid": w, "ppid": 1, "comm": "pt_data_worker", "cmdline": ["python3", "train.py"],
                         "threads": [{"tid": w, "comm": "pt_data_worker"}]} for w in workers])
    if main:
        b.fork(us(3), 0, MAIN, MAIN, PIN, MAIN, "python3", "python3", thread=True)
        b.rename(us(4), 0, PIN, MAIN, "python3", "pt_data_pin")
        b.fork(us(5), 0, MAIN, MAIN, OTHER, MAIN, "python3", "python3", thread=True)
        for i, w in enumerate(workers):
            b.fork(us(10 + i), 0, MAIN, MAIN, w, w, worker_comm or "python3", "python3")
            if worker_comm is None:
                b.rename(us(20 + i), 1 + i, w, w, "python3", "pt_data_worker")
        b.switch(us(50), 0, IDLE, MAIN, prev_tracked=False)
    for i, w in enumerate(workers):
        b.switch(us(50), 1 + i, IDLE, w, prev_tracked=False)
    t = 100.0
    rows = []
    for k, wait in enumerate(waits):
        end = t + run_us + wait
        if main:
            b.switch(us(t + run_us), 0, MAIN, IDLE, prev_state=main_state, next_tracked=False)
        for i, w in enumerate(workers):
            cpu, out = 1 + i, t + run_us / 2 + 7 * i
            if mode in PREV_STATE and out < end - 40:
                b.switch(us(out), cpu, w, IDLE, prev_state=PREV_STATE[mode], next_tracked=False)
                b.waking(us(end - 35), cpu, IDLE, w, cpu)
                b.switch(us(end - 30), cpu, IDLE, w, prev_tracked=False)
            elif mode == "runnable" and out < end - 40:
                b.switch(us(out), cpu, w, STRANGER, prev_state=0, next_tracked=False)
                b.switch(us(end - 30), cpu, STRANGER, w, prev_tracked=False)
        who = (wakers or {}).get(k, "worker")
        if not main:
            pass
        elif who == "worker" and workers:
            b.waking(us(end - 5), 1, workers[0], MAIN, 0)
        elif who in ("pin", "other"):  # a thread of MAIN's process runs on its CPU and wakes it
            by = PIN if who == "pin" else OTHER
            b.switch(us(end - 8), 0, IDLE, by, prev_tracked=False)
            b.waking(us(end - 5), 0, by, MAIN, 0)
            b.switch(us(end), 0, by, MAIN, prev_state=1)
        else:  # an interrupt on the idle CPU
            b.waking(us(end - 5), 0, IDLE, MAIN, 0)
        if main and who not in ("pin", "other"):
            b.switch(us(end), 0, IDLE, MAIN, prev_tracked=False)
        b.flush()
        spec = (py or {}).get(k)
        for key, off, length in ([(spec, 0, wait)] if isinstance(spec, str) else spec) if spec else ():
            sid = UNSENT if key == "?" else STACKS[key][0]
            rows.append((PY.PY_WAIT, us(t + run_us + off), int(length * 1000), sid, MAIN, 0))
        t = end
    for i, w in enumerate(workers):
        b.switch(us(t + 50), 1 + i, w, IDLE, prev_state=1, next_tracked=False)
    if main:
        b.switch(us(t + 100), 0, MAIN, IDLE, prev_state=1, next_tracked=False)
    if tail_us and workers:
        b.waking(us(t + tail_us - 10), 1, IDLE, workers[0], 1)
        b.switch(us(t + tail_us), 1, IDLE, workers[0], prev_tracked=False)
        b.switch(us(t + tail_us + 50), 1, workers[0], IDLE, prev_state=1, next_tracked=False)
        t += tail_us
    if rows:
        b.header["pystack"] = {"probes": probes.table(), "max_frames": 64, "sample_hz": 0}
        b.blocks.append(("meta", {"type": "py_stacks", "ts": us(6), "frames": FRAMES,
                                  "stacks": [[MAIN, f"{sid:x}", 0, idx] for sid, idx in STACKS.values()]}))
        b.header["rings"][str(PY.RING_PYSTACK)] = {"name": "pystack", "record_size": PY.PY_EVENT.itemsize,
                                                   "stride": ev.ring_stride(PY.PY_EVENT)}
        b.blocks.append(("ring", (PY.RING_PYSTACK, ev.encode_ring_bytes(py_events(sorted(rows, key=lambda r: r[1]))))))
    b.end_ts = us(t + 200)
    return b


def both_ways(tmp_path, b: LogBuilder, split="5ms", params=None):
    """(SQL status and findings on the single trace, the set's CheckResult, the set's index)."""
    raw = b.write(tmp_path / "run.tlraw", end_block(stop_ts=b.end_ts))
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    res = convert(raw, str(tmp_path / "set.pftrace"), split=SplitSpec(duration_ns=int(float(split[:-2]) * 1e6)))
    with open(f"{res.out_path}/index.json") as f:
        index = json.load(f)
    got = check_set(res.out_path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=[CHECK], workers=1,
                    params=params).results[0]
    return sql_findings(one, CHECK), got, index


def same(tmp_path, b, split="5ms"):
    """The SQL's status and findings, after asserting the index's partial gives them."""
    (status, want), got, index = both_ways(tmp_path, b, split)
    assert CHECK in index.get("partials", {}), index.get("partials")
    assert got.note == FROM_INDEX
    assert (got.status, got.findings) == (status, want)
    return status, want


def index_of(tmp_path, b: LogBuilder, split="5ms") -> dict:
    """The index of the log converted as a set (no trace_processor)."""
    raw = b.write(tmp_path / "run.tlraw", end_block(stop_ts=b.end_ts))
    res = convert(raw, str(tmp_path / "set.pftrace"), split=SplitSpec(duration_ns=int(float(split[:-2]) * 1e6)))
    with open(f"{res.out_path}/index.json") as f:
        return json.load(f)


LINES = {"A": "data.py:7 load", "B": "train.py:12 inner", "C": "train.py:57 step", "D": "train.py:90 main"}
CASES = {
    # workers in disk wait; the main thread waits in four Python lines (top 3 listed), one wait slice
    # inside another (cut at its start) and one without a known stack (no line, but it cuts the one before)
    "disk": dict(waits=[600] * 20, mode="disk",
                 py={3: "A", 5: "A", 7: (("B", 0, 350),), 9: (("C", 0, 590), ("D", 300, 200), ("?", 400, 100)),
                     11: "D"}),
    "running": dict(waits=[600] * 20, mode="running"),
    "runnable": dict(waits=[600] * 20, mode="runnable"),
    # woken by the pin-memory thread (a provider), by a thread of its own and by nobody (not stalls)
    "sleeping": dict(waits=[6000] * 20, mode="sleeping", wakers={1: "pin", 2: "other", 3: "idle", 4: "other"}),
    "warning": dict(waits=[100] * 20, mode="disk"),
    "ok": dict(waits=[20] * 20, mode="disk"),
    "in_disk_sleep": dict(waits=[600] * 20, mode="sleeping", main_state=2),  # the main thread's own sleeps in D
    "process_named": dict(waits=[600] * 10, mode="disk", worker_comm="pt_data_worker"),
    "no_workers": dict(waits=[600] * 10, mode="disk", workers=()),
    "no_main_thread": dict(waits=[600] * 10, mode="disk", start="workers_only"),
}
EXPECT = {"disk": ("error", "disk wait"), "running": ("error", "mostly computing"),
          "runnable": ("error", "runnable but not running"), "sleeping": ("error", "mostly sleeping"),
          "warning": ("warning", "disk wait"), "ok": ("ok", "mostly computing"), "in_disk_sleep": ("error", "sleeping"),
          "process_named": ("error", "disk wait"), "no_workers": ("n/a", None), "no_main_thread": ("n/a", None)}


@pytest.mark.parametrize("case", list(CASES))
def test_partial_gives_the_sql_findings(tmp_path, case):
    """Each condition of the check, the SQL on one trace vs the index of a set of 5 ms chunks."""
    status, want = same(tmp_path, stall_log(**CASES[case]))
    expected, hint = EXPECT[case]
    assert status == expected, want
    if hint:
        assert hint in want[0].hint, want[0]
    if case == "disk":  # each sleep is 595 us (woken 5 us before it runs); C is cut at D's start (300 us),
        # D at the stack-less slice's (100 us): A 1190, D 695, B 350, C 300 us
        assert want[0].evidence["python_line"] == LINES["A"] and want[0].evidence["python_share"] == 0.1
        assert want[0].message.endswith("; it waited in Python at data.py:7 load (10%), train.py:90 main (6%), "
                                        "train.py:12 inner (3%)"), want[0].message
    if case == "sleeping":  # 3 of the 20 sleeps were not ended by a provider (the pin thread is one)
        assert want[0].evidence["waited_s"] == round(17 * 5995e-6, 3)
    if case == "no_main_thread":
        assert [f.message for f in want] == ["DataLoader workers found but no main training thread"]


def test_worst_windows(tmp_path):
    """Over a 3 s run, the windows of 1 s where the main thread waited most, worst first (chunks of 500 ms)."""
    b = stall_log([90_000] * 10 + [5_000] * 10 + [40_000] * 20 + [70_000] * 10, "disk", run_us=10_000,
                  wakers={k: "other" for k in range(30, 35)})
    status, want = same(tmp_path, b, "500ms")
    windows = [f for f in want if f.message.startswith("worst window")]
    assert status == "error" and len(windows) == 3
    shares = [f.evidence["stall_fraction"] for f in windows]
    assert shares == sorted(shares, reverse=True) and shares[-1] > 0.1


def test_widened_windows(tmp_path):
    """A DataLoader run of 120,000 s would need more than WINDOW_CAP windows: the info row on the
    widened ones, as the SQL writes it."""
    status, want = same(tmp_path, stall_log([600] * 5, "disk", tail_us=1.2e11), "40000000ms")
    assert status == "ok"
    assert [f.message for f in want if f.severity == "info"] == [
        "the DataLoader's run of 120000 s would need 120,001 windows of 1 s: they are 1 s long instead "
        "(100,000 of them)"]


def test_other_parameters_run_the_sql(tmp_path):
    """A run with other parameters than the partial was made with goes through trace_processor: a
    20% stall, a warning by default, is ok from 50%."""
    b = stall_log([100] * 10, "disk")
    (status, _), got, index = both_ways(tmp_path, b, "200ms", params={CHECK: {"warn_fraction": 0.5}})
    assert CHECK in index["partials"]
    assert status == "warning" and got.note == NOT_MERGED and got.status == "ok"


def test_main_threads_marked_alike_are_told_apart_as_the_prelude_does(tmp_path):
    """Two training processes' main threads marked over the same span: the prelude takes the earliest
    marker, then the lowest tid (never trace_processor's row order), and so does the partial."""
    status, want = same(tmp_path, stall_log([600] * 5, "disk", start="twins"), "2000ms")
    assert status in ("warning", "error") and f"(tid {MAIN})" in want[0].message, want


def test_tied_worst_windows_are_listed_earliest_first(tmp_path):
    """Worst windows of the same share (a 3.5 s wait over whole windows): the SQL lists the earliest
    first (its order by breaks the tie by time, not by SQLite's sorter), and so does the partial."""
    _, want = same(tmp_path, stall_log([3_500_000, 600, 600], "disk", run_us=10_000), "2000ms")
    worst = [f for f in want if f.message.startswith("worst window")]
    tied = [f.ts for f in worst if f.evidence["stall_fraction"] == 1.0]
    assert len(tied) >= 2 and tied == sorted(tied), worst


@pytest.mark.parametrize("case", ["crossing_waits", "touching_waits", "waits_at_one_ts"])
def test_no_partial_where_the_sql_answer_hangs_on_row_order(tmp_path, case):
    """Where trace_processor's row order decides, the converter writes no partial and the SQL runs:
    two `wait` slices that cross (trace_processor ends the inner one first), one that starts where
    another ends (which of the two trace_processor sees first) or two that start together (which one
    lead() sees next)."""
    b = {"crossing_waits": lambda: stall_log([600] * 5, "disk", py={2: (("B", 0, 300), ("D", 200, 400))}),
         "touching_waits": lambda: stall_log([600] * 5, "disk", py={2: (("B", 0, 300), ("D", 300, 200))}),
         "waits_at_one_ts": lambda: stall_log([600] * 5, "disk", py={2: (("B", 0, 300), ("D", 0, 400))}),
         }[case]()
    index = index_of(tmp_path, b, "2000ms")
    assert CHECK not in index.get("partials", {})
