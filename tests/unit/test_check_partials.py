"""Checks computed at conversion (timeline/checks/partials): kernel_outliers', gpu_queue_delay's and
gpu_breakdown's partials, written into a trace set's index by the converter and merged by `timeline
check SET` without trace_processor, give the findings their SQL gives on the same recording converted
as one trace.  Synthetic raw logs with
the cuda family's launch calls and the gpu family's kernels (test_gpu_convert.GpuLog), converted both
ways through the real converter; the SQL through the wasm trace_processor."""
from __future__ import annotations

import json
import os
import re
import sys

import pytest

from test_gpu_convert import GpuLog, full_log, us
from test_pystack_convert import FRAMES, py_events
from timeline.cuda.probes import BY_NAME
from timeline.pystack import probes
from timeline.pystack import records as PY
from timeline import events as ev
from timeline.checks import run_checks
from timeline.checks.runner import prelude_sql
from timeline.checks.traceset import FROM_INDEX, NOT_MERGED, check_set
from timeline.converters import convert
from timeline.converters.trace_set import SplitSpec
from timeline.gpu import records as R
from timeline.identity import invoking_user
from timeline.trace_processor import TraceProcessorConfig, open_trace

CHECK = "kernel_outliers"
STACKS = {"A": (0xA, [0, 1, 2, 3]), "B": (0xB, [4, 2, 3])}  # train.py:12 inner ..., data.py:7 load ...


class StackedGpuLog(GpuLog):
    """GpuLog plus the pystack family's stacks taken at some launches (`stacked`: launch ts -> stack, or
    (stack, function, tid) for another launch function or thread than cudaLaunchKernel on TID)."""

    def __init__(self):
        super().__init__()
        self.stacked: dict[int, str] = {}

    def builder(self):
        b = super().builder()
        if self.stacked:
            b.header["pystack"] = {"probes": probes.table(), "max_frames": 64, "sample_hz": 0}
            b.blocks.append(("meta", {"type": "py_stacks", "ts": us(1), "frames": FRAMES,
                                      "stacks": [[1000, f"{sid:x}", 0, idx] for sid, idx in STACKS.values()]}))
            at = {ts: v if isinstance(v, tuple) else (v, "cudaLaunchKernel", 1000) for ts, v in self.stacked.items()}
            rows = [(PY.PY_CALL, ts + 300, 800, STACKS[k][0], tid, BY_NAME[fn].id)
                    for ts, (k, fn, tid) in sorted(at.items())]
            recs = py_events(rows)
            b.header["rings"][str(PY.RING_PYSTACK)] = {"name": "pystack", "record_size": PY.PY_EVENT.itemsize,
                                                       "stride": ev.ring_stride(PY.PY_EVENT)}
            b.blocks.append(("ring", (PY.RING_PYSTACK, ev.encode_ring_bytes(recs))))
        return b


def training_log(steps=40, slow=(), unlinked_device=False, stacks=None, warmup_us=0, delay_us=3) -> GpuLog:
    """A process launching kernels k0..k4 (each its own function pointer, so each its own kernel
    to the start-up rule) 20 us each, steps of 5 launches; `slow`: {(step, i): kernel us}.
    unlinked_device: kernels on GPU 1 that no launch call's flow reaches; stacks: {(step, i): "A" or "B"},
    the Python stack taken at that launch; warmup_us: a pause before k4's first launch (the end of
    the start-up)."""
    g = StackedGpuLog()
    names = [g.string(i + 1, f"k{i}") for i in range(5)]
    t, free = 2000.0, 0.0
    for step in range(steps):
        t += 300
        for i in range(5):
            if step == 0 and i == 4:
                t += warmup_us
            dur = slow.get((step, i), 20)
            begin = max(t + delay_us, free)
            g.corr += 1
            g.call("cudaLaunchKernel", us(t), 5000, args=(0x1000 + 16 * i,))
            if (step, i) in (stacks or {}):
                g.stacked[us(t)] = stacks[step, i]
            g.rec(R.API, us(t) + 200, us(t) + 4800, tid=1000, correlation=g.corr, domain=211)
            g.rec(R.KERNEL, us(begin), us(begin + dur), correlation=g.corr, device=0, stream=7, name=names[i],
                  grid=(1, 1, 1), block=(32, 1, 1))
            free = begin + dur
            t += 25
        if unlinked_device:
            g.rec(R.KERNEL, us(t), us(t + 10), correlation=10_000 + step, device=1, stream=3, name=names[0])
    return g


def sql_findings(path, check=CHECK):
    with open_trace(path, engine="wasm") as tp:
        r = next(x for x in run_checks(tp, path, only=[check]).results)
    return r.status, r.findings


def set_result(path, check=CHECK):
    return check_set(path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=[check], workers=1).results[0]


def converted(tmp_path, g: GpuLog, split="5ms"):
    """(the log converted as one trace, as a set split every `split`, the set's index)."""
    raw = g.write(tmp_path / "run.tlraw", block=200)
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    spec = SplitSpec(duration_ns=int(float(split[:-2]) * 1e6))
    res = convert(raw, str(tmp_path / "set.pftrace"), split=spec)
    with open(f"{res.out_path}/index.json") as f:
        index = json.load(f)
    return one, res.out_path, index


def both_ways(tmp_path, g: GpuLog, split="5ms", check=CHECK):
    """(SQL status and findings on the single trace, the set's CheckResult, the set's index, its path)."""
    one, path, index = converted(tmp_path, g, split)
    return sql_findings(one, check), set_result(path, check), index, path


@pytest.mark.parametrize("case", ["outlier", "startup_only", "none", "too_few_runs", "below_min_us",
                                  "python_lines"])
def test_partial_gives_the_sql_findings(tmp_path, case):
    """Each of the check's edge conditions, SQL on one trace vs partial+merge on a set of ~5 ms chunks:
    a steady-state outlier (and two more, so the worst-3 list is cut); a slow kernel in the start-up only
    (the first launch of k4, the last kernel new to the process, ends it: left out); none; kernels run
    fewer than min_runs times (no median: n/a); a kernel 20x its median but under min_outlier_us;
    Python stacks at some launches (the outliers name the line most of them came from)."""
    slow = {"outlier": {(20, 0): 2000, (25, 1): 900, (30, 1): 800, (33, 3): 700},
            "startup_only": {(0, 1): 2000},
            "none": {},
            "too_few_runs": {(5, 0): 2000},
            "below_min_us": {(20, 2): 90},
            "python_lines": {(20, 0): 2000, (25, 0): 1500, (30, 0): 900, (35, 1): 800}}[case]
    stacks = {(20, 0): "A", (25, 0): "B", (30, 0): "A", (10, 0): "B"} if case == "python_lines" else None
    (status, want), got, index, _ = both_ways(tmp_path, training_log(steps=8 if case == "too_few_runs" else 40,
                                                                      slow=slow, stacks=stacks))
    assert "kernel_outliers" in index.get("partials", {}), index.get("partials")
    assert len(index["chunks"]) > 3
    assert got.note == FROM_INDEX  # no trace_processor for it
    assert (got.status, got.findings) == (status, want)
    expected = {"outlier": "warning", "startup_only": "ok", "none": "ok", "too_few_runs": "n/a",
                "below_min_us": "ok", "python_lines": "warning"}[case]
    assert status == expected, want
    if case == "outlier":
        assert [f.evidence["max_us"] for f in want if f.severity == "info"] == [2000, 900, 800]
        assert {f.evidence["kernel"]: f.evidence["outliers"] for f in want if f.severity == "warning"} == \
            {"k0": 1, "k1": 2, "k3": 1}
    if case == "python_lines":
        k0 = next(f for f in want if f.severity == "warning" and f.evidence["kernel"] == "k0")
        assert k0.evidence["python_line"] == "train.py:12 inner" and k0.evidence["python_share"] == 0.6667
        assert [f.evidence.get("python_line") for f in want if f.severity == "info"] == \
            ["train.py:12 inner", "data.py:7 load", "train.py:12 inner"]


def test_split_and_unsplit_agree_with_chunk_sizes(tmp_path):
    """One chunk or dozens: the same findings as the single trace's SQL."""
    g = training_log(slow={(12, 2): 1500, (37, 4): 600})
    for split in ("2000ms", "3ms"):
        d = tmp_path / split
        d.mkdir()
        (status, want), got, index, _ = both_ways(d, g, split)
        assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want) and status == "warning"


def test_a_report_from_the_index_alone_names_no_engine_and_the_sets_span(tmp_path):
    """Every check asked for comes from the index: no chunk is opened, so the report says no
    engine ran, and takes the span and the families from the index (it said '? engine' and
    'recorded: none')."""
    _, path, index = converted(tmp_path, training_log(slow={(30, 2): 400}))
    rep = check_set(path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=[CHECK, "gpu_queue_delay"],
                    workers=1)
    chunks = index["chunks"]
    assert rep.engine is None and all(r.note == FROM_INDEX for r in rep.results)
    assert (rep.start_ts, rep.end_ts) == (chunks[0]["start_ns"], chunks[-1]["end_ns"])
    assert {"cuda", "gpu"} <= {f for f, on in rep.families.items() if on}


def test_other_parameters_and_old_sets_run_the_sql(tmp_path):
    """A set written before partials (no key in its index), a run with other parameters and an index
    whose partial is not as written go through trace_processor, per chunk, as before."""
    (_, want), got, index, path = both_ways(tmp_path, training_log(slow={(20, 0): 2000}), "200ms")
    assert got.note == FROM_INDEX
    other = check_set(path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=[CHECK], workers=1,
                      params={CHECK: {"outlier_factor": 4}}).results[0]
    assert other.note == NOT_MERGED
    broken = json.loads(json.dumps(index))
    broken["partials"][CHECK]["stats"] = {"k0": "not four numbers"}  # an index not as written
    with open(f"{path}/index.json", "w") as f:
        json.dump(broken, f)
    assert set_result(path).note == NOT_MERGED
    index.pop("partials")
    for c in index["chunks"]:
        c.pop("partials", None)
    with open(f"{path}/index.json", "w") as f:
        json.dump(index, f)
    old = set_result(path)
    assert old.note == NOT_MERGED and old.status in ("warning", "ok", "n/a")


def test_no_partial_where_the_sql_would_pick_the_main_thread(tmp_path):
    """GPU 1's kernels are reached by no flow: its owner is the prelude's main thread, which the
    partial does not model, so the converter writes none and the SQL decides."""
    _, got, index, _ = both_ways(tmp_path, training_log(slow={(20, 0): 2000}, unlinked_device=True), "200ms")
    assert "kernel_outliers" not in index.get("partials", {})
    assert got.note == NOT_MERGED


def test_every_kind_of_record(tmp_path):
    """test_gpu_convert's log of every record kind: a graph launch (three kernels, one call), a launch
    from a second thread, a call the cuda family did not probe, copies and a memset, a copy on GPU 1.
    Too few runs for a median: n/a both ways, from the index."""
    (status, want), got, index, _ = both_ways(tmp_path, full_log(), split="2ms")
    assert "kernel_outliers" in index.get("partials", {})
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want) and status == "n/a"


@pytest.mark.parametrize("host_bound", [True, False])
def test_gpu_queue_delay_partial_gives_the_sql_findings(tmp_path, host_bound):
    """test_gpu_convert's scenarios (NCCL kernels from NCCL calls, a synchronize between steps): a
    host-bound run (kernels start 3 us after their launch, the GPU idle half the time: warning) and a
    GPU-bound one (a queue in front of the GPU: ok), SQL on one trace vs the set's index; and the
    training log above, whose first steps are start-up."""
    from test_gpu_convert import check_log
    training = training_log(slow={(0, 0): 10_000, (20, 0): 2000}, warmup_us=20_000)  # 10 ms busy in start-up
    for name, g in (("scenario", check_log(host_bound)), ("training", training)):
        d = tmp_path / name
        d.mkdir()
        one, path, index = converted(d, g, "3ms")
        assert "gpu_queue_delay" in index.get("partials", {})
        status, want = sql_findings(one, "gpu_queue_delay")
        got = set_result(path, "gpu_queue_delay")
        assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
        if name == "scenario":
            assert status == ("warning" if host_bound else "ok"), want
        else:  # the start-up's 10 ms of GPU work is not counted busy (it would make the GPU ~5% idle)
            idle = int(re.search(r"the GPU was idle (\d+)%", want[0].message).group(1))
            assert status == "warning" and 50 < idle < 80, want


def test_a_number_on_a_rounding_edge_prints_as_the_sql(tmp_path):
    """Kernels starting 2.05 us after their launch: the median delay, printed %.1f, is 2.0 in
    trace_processor's SQLite (the double is just below 2.05) where 16 digits round to 2.1; the
    partial prints the exact double as SQLite does."""
    one, path, index = converted(tmp_path, training_log(slow={}, delay_us=2.05), "3ms")
    assert "gpu_queue_delay" in index.get("partials", {})
    status, want = sql_findings(one, "gpu_queue_delay")
    assert "kernels started 2.0 us (median" in want[0].message, want
    got = set_result(path, "gpu_queue_delay")
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)


def test_a_single_slice_is_read_as_a_batch_of_one():
    """The sink's per-event `slice` reaches the collector as `slices` would with one row; slices of
    other categories without flows are not held."""
    import numpy as np
    from timeline.checks.partials._gpu import GpuColumns
    from timeline.converters.interface import Column

    one, batch = GpuColumns(), GpuColumns()
    one.slice(100, 10, 5, 5, "ioctl", "ioctl", {"cmd": 1})
    one.slice(200, 10, 5, 5, "cudaLaunchKernel", "cuda", {"kernel": "k0"}, flow_out=[7, 8])
    batch.slices(np.array([200]), np.array([10]), np.array([5]), np.array([5]), "cudaLaunchKernel", "cuda",
                 [Column("kernel", "str", np.zeros(1, np.int64), ["k0"])], flow_out=np.array([[7, 8]], np.uint64))
    for a, b in ((one.launch, batch.launch), (one.src, batch.src), (one.subs, batch.subs)):
        assert len(a) == len(b) > 0
        for x, y in zip(a, b):
            assert all(np.array_equal(u, v) for u, v in zip(x, y))
    # one launch, held as such and as a GPU submission, two flow sources: the ioctl slice is not held
    assert one.rows == batch.rows == 4


def test_a_partial_too_big_for_the_index_is_left_out(tmp_path, monkeypatch):
    """Past MAX_BYTES of JSON a check's partial is not written (index.json is read up to 16 MiB): the
    SQL runs."""
    from timeline.checks import partials
    monkeypatch.setattr(partials, "MAX_BYTES", 200)
    _, got, index, _ = both_ways(tmp_path, training_log(slow={(20, 0): 2000}), "200ms")
    written = set(index.get("partials", {}))
    assert CHECK not in written and not any(CHECK in c.get("partials", {}) for c in index["chunks"])
    assert written, "a small partial (a check with nothing to say) is still written"
    assert all(len(json.dumps(v)) <= 200 for v in index["partials"].values())
    assert got.note == NOT_MERGED


def breakdown(path):
    return set_result(path, "gpu_breakdown")


@pytest.mark.parametrize("host_bound", [True, False])
@pytest.mark.parametrize("copies", [False, True])
def test_gpu_breakdown_partial_gives_the_sql_findings(tmp_path, host_bound, copies):
    """test_gpu_convert's scenarios without their NVTX steps: host-bound (the GPU idle half the
    steady state: warning; the NCCL kernel runs alone after the step's kernels: communication not
    overlapped) and GPU-bound (ok; the NCCL kernel runs beside compute: not counted), each with and
    without a copy per step (alone on the host-bound GPU, beside compute on the GPU-bound one);
    SQL on one trace vs the set's index, severity, text and every fraction."""
    from test_gpu_convert import check_log
    one, path, index = converted(tmp_path, check_log(host_bound, steps=False, copies=copies), "3ms")
    assert "gpu_breakdown" in index.get("partials", {}) and len(index["chunks"]) > 3
    status, want = sql_findings(one, "gpu_breakdown")
    got = breakdown(path)
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    assert status == ("warning" if host_bound else "ok"), want
    (f,) = want
    ev_ = f.evidence
    assert (ev_["comm_fraction"] > 0.1) == host_bound, ev_
    assert (ev_["copy_fraction"] > 0.02) == (copies and host_bound), ev_
    assert ev_["compute_fraction"] > 0.2 and (ev_["idle_fraction"] >= 0.3) == host_bound, ev_


def test_gpu_breakdown_over_the_steady_state_only(tmp_path):
    """The training log whose first steps are start-up (10 ms of GPU work before k4's first launch):
    left out of the window, as the SQL does; the finding's "from +x s" is the window's start."""
    g = training_log(slow={(0, 0): 10_000, (20, 0): 2000}, warmup_us=20_000)
    one, path, index = converted(tmp_path, g, "3ms")
    status, want = sql_findings(one, "gpu_breakdown")
    got = breakdown(path)
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    assert status == "warning" and "from +0.00 s" not in want[0].message, want


@pytest.mark.parametrize("host_bound", [True, False])
def test_gpu_breakdown_per_step_row_gives_the_sql_findings(tmp_path, host_bound):
    """test_gpu_convert's scenarios with their NVTX steps on the marked main thread (host-bound: one
    slow kernel makes step 30 the worst), plus ranges inside steps (one of the step name: not a step)
    and another thread's ranges of more total time (not the main thread's): both rows, from the index,
    equal the unsplit trace's SQL. Steps cross chunk boundaries (3 ms chunks)."""
    from test_gpu_convert import WORKER, check_log
    g = check_log(host_bound)
    inner, loader = g.string(22, "forward"), g.string(23, "load_batch")
    for k in range(STEPS_WITH_INNER):
        start = us(2400 + 1600 * k) if host_bound else us(2200 + 1900 * k)
        g.nvtx(inner, start, start + 30_000, depth=1)
    g.nvtx(20, us(2401), us(2420), depth=2)  # the step name nested inside a step
    for k in range(4):
        g.nvtx(loader, us(2000 + 20_000 * k), us(2000 + 20_000 * k + 19_000), tid=WORKER)
    one, path, index = converted(tmp_path, g, "3ms")
    assert "gpu_breakdown" in index["partials"]
    status, want = sql_findings(one, "gpu_breakdown")
    got = breakdown(path)
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    steps = [f for f in want if "per step" in f.message]
    assert len(steps) == 1 and "'train_step', 50 steps" in steps[0].message
    avg, worst = re.findall(r"(\d+)% (?:on average|in the worst)", steps[0].message)
    assert int(worst) > int(avg) or not host_bound  # uneven steps: which one is the worst matters


STEPS_WITH_INNER = 5


def test_gpu_breakdown_without_a_main_thread_marker_runs_the_sql(tmp_path, monkeypatch):
    """Without the recorder's marker the SQL picks the main thread by other rules (launches, then
    scheduling): no partial, the SQL decides; the other GPU partials still are written. NVTX names
    repeated twice are too few for a step name: the partial is written, without a step row."""
    from timeline.kctx import dataloader
    from test_gpu_convert import check_log
    d = tmp_path / "steps"
    d.mkdir()
    monkeypatch.setattr(dataloader, "MAIN", "unmarked")
    _, path, index = converted(d, check_log(True), "3ms")
    assert "gpu_breakdown" not in index["partials"] and {"kernel_outliers", "gpu_queue_delay"} <= set(index["partials"])
    assert breakdown(path).note == NOT_MERGED
    g = check_log(True, steps=False)
    name = g.string(21, "warmup")
    g.nvtx(name, us(2000), us(2400))
    g.nvtx(name, us(2500), us(2900))
    one, path, index = converted(tmp_path, g, "3ms")
    status, want = sql_findings(one, "gpu_breakdown")
    got = breakdown(path)
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want) and status == "warning"


def test_gpu_breakdown_without_partials_runs_the_sql(tmp_path):
    """A set written before gpu_breakdown's partial (its key not in the index) and a run with another
    idle_warn_fraction go through trace_processor."""
    from test_gpu_convert import check_log
    _, path, index = converted(tmp_path, check_log(False, steps=False), "3ms")
    other = check_set(path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=["gpu_breakdown"], workers=1,
                      params={"gpu_breakdown": {"idle_warn_fraction": 0.01}}).results[0]
    assert other.note == NOT_MERGED
    index["partials"].pop("gpu_breakdown")
    with open(f"{path}/index.json", "w") as f:
        json.dump(index, f)
    assert breakdown(path).note == NOT_MERGED


def test_no_gpu_partial_past_max_rows(tmp_path, monkeypatch):
    """Past MAX_ROWS held rows (GPU work, flow sources, launches) the columns are dropped and none of
    the GPU partials is written: the SQL runs."""
    from test_gpu_convert import check_log
    from timeline.checks.partials import _gpu
    monkeypatch.setattr(_gpu, "MAX_ROWS", 500)
    _, path, index = converted(tmp_path, check_log(True, steps=False), "3ms")
    assert not {"kernel_outliers", "gpu_queue_delay", "gpu_breakdown"} & set(index.get("partials", {}))
    assert breakdown(path).note == NOT_MERGED


def test_gpu_breakdown_steps_only_where_the_sql_choice_is_certain():
    """gpu_breakdown's step picking on its own (the converter's held columns faked): the marked
    thread's top-level ranges of the most-time name; no partial (None) on each tie the SQL breaks by
    trace_processor's own order: two longest markers alike but for their process, two step names of
    equal total time, two ranges of different names over the same span."""
    import numpy as np
    from types import SimpleNamespace

    from timeline.checks.partials.gpu_breakdown import _steps

    def cols(marks, ranges):  # ranges: (ts, dur, tid, name id)
        arr = [(np.array([ts]), np.array([dur]), np.array([tid]), np.array([1]), np.array([n]))
               for ts, dur, tid, n in ranges]
        return SimpleNamespace(marks=marks, ranges=arr, s=SimpleNamespace(strings={1: "step", 2: "fwd", 3: "other"}))

    steps = [(100 * k, 50, 7, 1) for k in range(3)] + [(100 * k + 10, 5, 7, 2) for k in range(3)]
    (ts, dur), name = _steps(cols([(1000, 0, 7, 1)], steps))
    assert name == "step" and ts.tolist() == [0, 100, 200] and dur.tolist() == [50, 50, 50]
    # another thread's name of more time is not the main thread's
    other = [(1000 + 500 * k, 400, 8, 3) for k in range(3)]
    (ts, _), name = _steps(cols([(1000, 0, 7, 1)], steps + other))
    assert name == "step" and ts.tolist() == [0, 100, 200]
    # markers (dur, ts, tid, pid) of one length: the earliest, then the lowest tid, as the prelude
    # picks; alike but for the process (merged machines): the SQL's row order, no partial
    assert _steps(cols([(1000, 0, 8, 1), (1000, 0, 7, 1)], steps + other))[1] == "step"
    assert _steps(cols([(1000, 0, 7, 1), (1000, 0, 8, 1)], steps + other))[1] == "step"
    assert _steps(cols([(1000, 5, 7, 1), (1000, 0, 8, 1)], steps + other))[1] == "other"
    assert _steps(cols([(999, 0, 8, 1), (1000, 5, 7, 1)], steps + other))[1] == "step"
    assert _steps(cols([(1000, 0, 7, 1), (1000, 0, 7, 2)], steps)) is None
    assert _steps(cols([(1000, 0, 7, 1)], steps + [(1000 + 100 * k, 50, 7, 3) for k in range(3)])) is None  # tied names
    assert _steps(cols([(1000, 0, 7, 1)], steps + [(0, 50, 7, 3)])) is None  # same span, another name
    assert _steps(cols([], steps)) is None  # no marker


def test_gpu_breakdown_on_ranks_marked_over_one_span(tmp_path):
    """bench/scale_8gpu.py's node: 8 ranks, each main thread marked over the same span (torchrun's
    ranks recorded as one job). The prelude takes the earliest marker, then the lowest tid, and so
    does the partial: the per-step row comes from the index, equal to the single trace's SQL."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    import scale_8gpu

    raw = str(tmp_path / "node.tlraw")
    scale_8gpu.build(raw, 0.0)  # its shortest: 10 steps of 100 launches per rank
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    res = convert(raw, str(tmp_path / "set.pftrace"), split=SplitSpec(duration_ns=30_000_000))
    status, want = sql_findings(one, "gpu_breakdown")
    got = breakdown(res.out_path)
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    assert sum("per step (NVTX range 'train_step'" in f.message for f in want) == 8
    with open_trace(one, engine="wasm") as tp:
        tp.query(prelude_sql())
        why, tid = tp.query("select why, tid from tl_main_thread").rows[0]
    assert why.startswith("marked") and tid == scale_8gpu.pid_of(0)


@pytest.mark.parametrize("case", ["exposed", "hidden", "none"])
def test_comm_overlap_partial_gives_the_sql_findings(tmp_path, case):
    """test_gpu_convert's scenarios: host-bound (the NCCL kernel alone after each step's kernels:
    exposed, a warning), GPU-bound (beside compute: hidden, ok); the training log (no NCCL kernel:
    n/a). SQL on one trace vs the set's index, severity, text and every column."""
    from test_gpu_convert import check_log
    g = training_log(slow={}) if case == "none" else check_log(case == "exposed", steps=False)
    one, path, index = converted(tmp_path, g, "3ms")
    assert "comm_overlap" in index.get("partials", {}) and len(index["chunks"]) > 3
    status, want = sql_findings(one, "comm_overlap")
    got = set_result(path, "comm_overlap")
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    assert status == {"exposed": "warning", "hidden": "ok", "none": "n/a"}[case], want
    if case != "none":
        assert (want[0].evidence["overlap_fraction"] < 0.5) == (case == "exposed"), want


def test_numbers_are_formatted_as_the_engines_sqlite_does():
    """_fixed (printf %.Nf) and _round (round(x, N)) against the wasm engine's SQLite on values at and
    next to half-way points, where 16 significant digits (0.015 -> '0.02') and the exact binary value
    (0.01499.. -> '0.01') part ways."""
    import random

    from timeline.checks.partials._gpu import _fixed, _round
    rnd = random.Random(3)
    xs = [(x, d) for d in (0, 1, 2, 3, 4) for x in (0.015, 0.025, 0.25, 2.5, 1.0005, 12.345)]
    xs += [((rnd.randint(0, 10**5) + 0.5) / 10**d * (1 + e), d) for d in (1, 2, 3)
           for e in (0, 1e-16, -1e-16) for _ in range(10)]
    with open_trace(os.path.join(os.path.dirname(__file__), "..", "..", "sample_traces", "cuda_calls.pftrace"),
                    engine="wasm") as tp:
        rows = tp.query(" union all ".join(f"select printf('%.{d}f', {x!r}), round({x!r}, {d})" for x, d in xs)).rows
    assert [(_fixed(x, d), _round(x, d)) for x, d in xs] == [(a, float(b)) for a, b in rows]
