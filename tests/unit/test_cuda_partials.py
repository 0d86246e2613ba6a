"""cuda_errors', cuda_graphs' and alloc_churn's partials (timeline/checks/partials/cuda_*.py,
alloc_churn.py): written into a trace set's index by the converter, merged without trace_processor,
they give the findings their SQL gives on the same recording converted as one trace. Synthetic raw logs
of CUDA calls with return codes (test_gpu_convert.GpuLog), split into ~5 ms chunks with calls crossing
the boundaries."""
from __future__ import annotations

import numpy as np
import pytest

from test_check_partials import both_ways
from test_gpu_convert import PID, TID, WORKER, GpuLog, us
from timeline.checks.traceset import FROM_INDEX
from timeline.cuda import records as cuda_records
from timeline.cuda.probes import BY_NAME


class CallLog(GpuLog):
    """GpuLog whose calls may return an error code or write an output (exec, ptr)."""

    def call(self, name, ts, dur, tid=TID, args=(), ret=0, out=None):
        p = BY_NAME[name]
        r = np.zeros(1, cuda_records.CUDA_EVENT)
        r["args"][0, :len(args)] = list(args)
        r["cookie"], r["tid"], r["tgid"], r["ts"], r["dur"] = p.cookie(), tid, PID, ts, dur
        r["kind"], r["flags"], r["ret"] = cuda_records.CUDA_CALL, cuda_records.CF_HAS_RET, ret & 0xFFFFFFFF
        if out is not None:
            r["out"], r["flags"] = out, r["flags"] | cuda_records.CF_OUT
        self.calls.append(r)


def assert_same(tmp_path, g, check):
    (status, want), got, index, _ = both_ways(tmp_path, g, check=check)
    assert check in index.get("partials", {}), "the converter wrote no partial"
    assert got.note == FROM_INDEX
    assert got.status == status
    assert [f.__dict__ for f in got.findings] == [f.__dict__ for f in want]
    return want


def error_log(case) -> CallLog:
    g = CallLog(span_us=40_000)
    g.call("cudaMemcpy", us(100), 50_000)  # a success (ret 0 recorded)
    if case == "none":
        g.call("cudaStreamQuery", us(300), 2_000, ret=600)  # polling: not an error
        return g
    t = 1000
    for i in range(12):  # 3 ms apart, 2.5 ms long: some cross the 5 ms chunk boundaries
        g.call("cudaMalloc", us(t), 2_500_000, args=(0, 1 << 20), ret=2)
        g.call("cudaStreamQuery", us(t + 2600), 2_000, ret=600)         # not ready: polling
        g.call("cudaMemcpy", us(t + 2700), 3_000, tid=WORKER, ret=600)  # 600 elsewhere: an error
        t += 3000
    g.call("cuMemAlloc_v2", us(2000), 30_000, tid=WORKER, args=(0, 4096), ret=2)
    g.call("cuStreamQuery", us(9000), 30_000, tid=WORKER, ret=700)
    g.call("cudaFree", us(9900), 4_000_000, tid=WORKER, args=(0x10,), ret=700)  # across a boundary, a call inside
    g.call("cudaFree", us(9800), 10_000, ret=1)  # first at the same ts on two threads
    g.call("cudaMemcpy", us(9800), 10_000, tid=WORKER, ret=1)
    return g


@pytest.mark.parametrize("case", ["errors", "none"])
def test_cuda_errors(tmp_path, case):
    want = assert_same(tmp_path, error_log(case), "cuda_errors")
    assert {f.severity for f in want} == ({"ok"} if case == "none" else {"error"})


def test_cuda_errors_declines_where_a_slice_crosses_a_failed_call(tmp_path):
    """An NVTX range starting inside a failed call and ending after it: trace_processor closes the call at
    the range's end; no partial, the SQL runs."""
    g = error_log("errors")
    g.nvtx((10, "step"), us(9805), us(9850), tid=WORKER)  # starts inside the failed cudaMemcpy, ends after it
    (status, want), got, index, _ = both_ways(tmp_path, g, check="cuda_errors")
    assert "cuda_errors" not in index.get("partials", {})
    assert got.note != FROM_INDEX and got.status == status


def graph_log(case) -> CallLog:
    """A capture, instantiation and launches per graph on TID (each 3 ms apart: set-up calls cross the 5 ms
    chunk boundaries); 'storm': a new graph every step launched once; 'never': a graph never launched;
    'noexec': instantiations that fail (no exec handle) and launches counted; 'none': no graph call."""
    g = CallLog(span_us=60_000)
    g.call("cudaMemcpy", us(100), 50_000)
    if case == "none":
        return g
    t = 1000
    graphs = 12 if case == "storm" else 3
    for i in range(graphs):
        ex = 0x7000 + 16 * i
        g.call("cudaStreamBeginCapture_ptsz" if i % 2 else "cudaStreamBeginCapture", us(t), 100_000, args=(0x5, 0))
        g.call("cudaStreamEndCapture", us(t + 200), 300_000, args=(0x5,), out=0x9000 + i)
        if case == "noexec" and i == 1:
            g.call("cudaGraphInstantiate", us(t + 600), 1_900_000, args=(0, 0x9000 + i, 0), ret=1)
        else:
            g.call("cudaGraphInstantiateWithFlags" if i == 2 else "cudaGraphInstantiate", us(t + 600), 1_900_000,
                   args=(0, 0x9000 + i, 0), out=ex)
        if not (case == "never" and i == 2):
            for j in range(1 if case == "storm" else 6):
                g.call("cudaGraphLaunch", us(t + 2600 + 50 * j), 20_000, args=(ex, 0x5))
        t += 3000
    g.call("cuGraphLaunch_ptsz", us(t), 5_000, tid=WORKER, args=(0x6000, 0x5))  # a graph not instantiated here
    return g


@pytest.mark.parametrize("case", ["storm", "never", "noexec", "none"])
def test_cuda_graphs(tmp_path, case):
    want = assert_same(tmp_path, graph_log(case), "cuda_graphs")
    assert {f.severity for f in want} == ({"warning"} if case in ("storm", "never") else {"ok"})


def test_cuda_graphs_other_parameters(tmp_path):
    """The reduce SQL runs at merge with the parameters asked for: min_replays 10 makes 'never' a storm."""
    from timeline.checks import run_checks
    from timeline.checks.traceset import check_set
    from timeline.identity import invoking_user
    from timeline.trace_processor import TraceProcessorConfig, open_trace
    from test_check_partials import converted
    params = {"cuda_graphs": {"min_replays": 10, "min_instantiations": 2}}
    one, path, index = converted(tmp_path, graph_log("never"))
    with open_trace(one, engine="wasm") as tp:
        want = next(iter(run_checks(tp, one, only=["cuda_graphs"], params=params).results)).findings
    got = check_set(path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=["cuda_graphs"], params=params,
                    workers=1).results[0]
    assert got.note == FROM_INDEX
    assert [f.__dict__ for f in got.findings] == [f.__dict__ for f in want]
    assert "re-captured" in want[0].message


def test_cuda_graphs_declines_where_a_slice_crosses_a_setup_call(tmp_path):
    """An NVTX range starting inside an instantiation and ending after it: no partial, the SQL runs."""
    g = graph_log("never")
    g.nvtx((10, "step"), us(1700), us(3550))
    (status, want), got, index, _ = both_ways(tmp_path, g, check="cuda_graphs")
    assert "cuda_graphs" not in index.get("partials", {})
    assert got.note != FROM_INDEX and got.status == status


def alloc_log(case) -> CallLog:
    """cudaMalloc/cudaFree pairs on TID, 3 ms apart ('oom': some return 2, as does a cudaMallocAsync),
    a cuMemAlloc_v2 on WORKER, async ones (counted only for OOM); 'none': no allocation."""
    g = CallLog(span_us=60_000)
    g.call("cudaMemcpy", us(100), 50_000)
    g.call("cudaLaunchKernel", us(50_000), 20_000, args=(0x1000,))  # the process' last CUDA call
    if case == "none":
        return g
    t = 1000
    for i in range(15):  # 3 ms apart: some cross the 5 ms chunk boundaries
        ptr = 0x10000 + 0x1000 * i
        fail = case == "oom" and i in (6, 7, 11)
        g.call("cudaMalloc", us(t), 1_000_000 + 37_000 * i, args=(0, (1 + i) << 20), ret=2 if fail else 0,
               out=None if fail else ptr)
        if i % 2 and not fail:
            g.call("cudaFree", us(t + 1500), 200_000 + 1000 * i, args=(ptr,))
        t += 3000
    g.call("cuMemAlloc_v2", us(2500), 30_000, tid=WORKER, args=(0, 4096), out=0x90000)
    # the first OOM at the end of the first cudaMalloc: its allocated-bytes sample counts (ts <=)
    g.call("cudaMallocAsync", us(2000), 3_000, tid=WORKER, args=(0, 4096, 0x5), ret=2 if case == "oom" else 0,
           out=None if case == "oom" else 0x91000)
    return g


@pytest.mark.parametrize("case", ["churn", "oom", "none"])
def test_alloc_churn(tmp_path, case):
    want = assert_same(tmp_path, alloc_log(case), "alloc_churn")
    assert ("error" in {f.severity for f in want}) == (case == "oom")


@pytest.mark.parametrize("where", [(50_010, 58_000), (7_100, 8_500), (5_600, 5_900)])
def test_alloc_churn_declines_where_a_slice_crosses_a_call(tmp_path, where):
    """An NVTX range starting inside the process' last CUDA call and ending after it (trace_processor makes
    the call end with it: another CUDA span), or starting inside a cudaMalloc or cudaFree and ending after it: no
    partial, the SQL runs."""
    g = alloc_log("churn")
    g.nvtx((10, "step"), us(where[0]), us(where[1]))
    (status, want), got, index, _ = both_ways(tmp_path, g, check="alloc_churn")
    assert "alloc_churn" not in index.get("partials", {})
    assert got.note != FROM_INDEX and got.status == status


def test_alloc_churn_without_allocations_ignores_slices_across_the_span(tmp_path):
    """With no allocation at all only the "no device allocations" row is printed: a range crossing the
    last CUDA call's end (which declines beside allocations, above) changes nothing there, and the
    partial is written (it was not on the 8-GPU bench node, loading every chunk for this one row)."""
    g = alloc_log("none")
    g.nvtx((10, "step"), us(50_010), us(58_000))
    (status, want), got, index, _ = both_ways(tmp_path, g, check="alloc_churn")
    assert "alloc_churn" in index.get("partials", {})
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    assert [f.message for f in want] == ["no device allocations or frees recorded"], want
