"""GPU-activity checks (gpu_breakdown, gpu_queue_delay, kernel_outliers,
comm_overlap) on SYNTHETIC traces written to the gpu family's trace contract
(docs/checks.md, "GPU activity"): kernel/copy slices on per-stream tracks with
categories gpu_kernel/gpu_memcpy, args device/stream/correlation_id, a flow
from each launch call to its kernel, NVTX step ranges on the main thread.
A host-bound run (short kernels the GPU starts as soon as they are launched,
Python between steps, an all-reduce after compute, one slow kernel) fires every
check; a GPU-bound one (a queue of long kernels, all-reduce overlapped) is quiet.
"""
from __future__ import annotations

import pytest

from rawlog_factory import LogBuilder, end_block
from test_query_check import PID, TID, Events, report, result, sched_base, us
from timeline.converters import convert

STEPS = 50


class GpuEvents(Events):
    span = Events.slice  # (the name the GPU tests read better with)


def no_sched_base(d, span_us) -> bytes:
    """Process PID with its thread TID, recorded without the sched family: no thread state."""
    b = LogBuilder(ncpu=2, target_pid=PID)
    b.procs(us(0), [{"pid": PID, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
                     "threads": [{"tid": TID, "comm": "python3"}]}])
    raw = b.write(d / "base.tlraw", end=end_block(stop_ts=us(span_us + 100)))
    convert(raw, str(d / "base.pftrace"), fmt="perfetto")
    return (d / "base.pftrace").read_bytes()


def gpu_trace(d, host_bound: bool, sched: bool = True) -> str:
    d.mkdir()
    span_us = 1_200_000
    base = sched_base(d, span_us) if sched else no_sched_base(d, span_us)
    ev = GpuEvents()
    th = ev.track(pid=PID, tid=TID, thread_name="python3")
    gpu = ev.track("GPU 0")
    compute, comm = ev.track("GPU 0 · stream 7", parent=gpu), ev.track("GPU 0 · stream 9", parent=gpu)
    util = ev.track("gpu0.utilization_pct", counter=True)  # NVML, low: superseded by the GPU's own timeline
    t, gpu_free, corr = 2000.0, 0.0, 0

    def launch(name, cat, kernel, gpu_dur, track, start=None):
        """A launch call at t (5 us) and its kernel, starting no earlier than `start`."""
        nonlocal t, corr
        corr += 1
        ev.span(th, us(t), 5000, name, cat, flow_out=corr, kernel=kernel, ret=0)
        begin = max(t + 3, start if start is not None else gpu_free)
        ev.span(track, us(begin), int(gpu_dur * 1000), kernel, "gpu_kernel", flow_in=corr, device=0,
                stream=7 if track == compute else 9, correlation_id=corr)
        t += 5
        return begin, begin + gpu_dur

    for step in range(STEPS):
        step_ts = t  # the step's NVTX range opens before its first call
        t += 1
        if host_bound:
            t += 500  # Python between steps: the GPU has nothing queued
            for i in range(10):
                dur = 2000 if (step == 30 and i == 0) else 20
                _, gpu_free = launch("cudaLaunchKernel", "cuda", f"k{i % 5}", dur, compute)
                t += 20
            _, end = launch("ncclAllReduce", "nccl", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 300, comm,
                            start=gpu_free)  # after compute: nothing to hide it behind
            gpu_free = end
            ev.span(th, us(t), int((end - t + 5) * 1000), "cudaStreamSynchronize", "cuda", ret=0)
            t = end + 10
        else:
            for i in range(10):
                begin, gpu_free = launch("cudaLaunchKernel", "cuda", f"k{i % 5}", 100, compute)
                if i == 4:  # the all-reduce of the previous bucket runs beside compute
                    launch("ncclAllReduce", "nccl", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 300, comm,
                           start=begin)
                t += 1
            t += 800  # the host runs ahead of the GPU: its queue grows
        ev.span(th, us(step_ts), int((t - step_ts) * 1000), "train_step", "nvtx", domain="default")
        ev.counter(util, us(t), 10.0)
    assert t < span_us
    out = d / "trace.pftrace"
    out.write_bytes(base + ev.data())
    return str(out)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu")
    return {"host": gpu_trace(d / "host", True), "gpu": gpu_trace(d / "gpu", False),
            "host-no-sched": gpu_trace(d / "host-no-sched", True, sched=False)}


GPU_CHECKS = ["gpu_breakdown", "gpu_queue_delay", "kernel_outliers", "comm_overlap"]


def test_gpu_family_detected(traces):
    rep = report(traces["host"], "wasm")
    assert rep.families["gpu"] and rep.families["cuda"]


def test_host_gpu_gaps_use_gpu_idle_time(traces):
    """With GPU activity, host_gpu_gaps judges each GPU's real idle time: the
    ~0.5 ms idle stretches per step (too short for the submission-gap rule)
    add up to half the steady state while the feeding thread ran Python."""
    bad = result(traces["host"], "wasm", "host_gpu_gaps")
    assert bad.status == "error", bad
    f = bad.findings[0]
    assert f.message.startswith("GPU 0 was idle") and "python3 (tid 1000)" in f.message
    assert f.evidence["gaps"] >= STEPS - 1 and 0.4 < f.evidence["gap_fraction"] < 0.6
    assert not any("utilization" in x.message for x in bad.findings)  # NVML is the fallback only
    ok = result(traces["gpu"], "wasm", "host_gpu_gaps")
    assert ok.status == "ok" and ok.findings[0].evidence["gap_fraction"] < 0.05


def test_host_gpu_gaps_without_thread_state_not_judged(traces):
    """The same host-bound run recorded without -e sched: the GPU's idle stretches
    are counted, but with no thread state nobody knows whether the feeding thread
    was on the CPU, so no error, an info line saying why (a real CUDA 12 run
    recorded with -e cuda,gpu was called host-bound on "assumed busy" time)."""
    r = result(traces["host-no-sched"], "wasm", "host_gpu_gaps")
    assert r.status == "info", r
    f = r.findings[0]
    assert f.severity == "info" and f.message.startswith("GPU 0 was idle"), f
    assert "thread state not recorded (-e sched)" in f.message and "assumed busy" not in f.message
    assert f.evidence["gaps"] == 0 and f.evidence["gap_fraction"] == 0
    assert not [x for x in r.findings if x.message.startswith("GPU idle for")]  # no per-gap lines either


def test_host_bound_run_fires(traces):
    path = traces["host"]
    st = {cid: result(path, "wasm", cid) for cid in GPU_CHECKS}
    assert {cid: r.status for cid, r in st.items()} == dict.fromkeys(GPU_CHECKS, "warning"), st

    bd = st["gpu_breakdown"].findings[0]
    # per step: 200 us of compute (+2 ms once), 300 us of all-reduce, ~0.9 ms of Python/launching
    assert 0.4 < bd.evidence["idle_fraction"] < 0.7 and 0.15 < bd.evidence["comm_fraction"] < 0.35
    steps = [f for f in st["gpu_breakdown"].findings if "per step" in f.message]
    assert len(steps) == 1 and "'train_step', 50 steps" in steps[0].message
    assert 0.4 < steps[0].evidence["idle_fraction"] < 0.65

    qd = st["gpu_queue_delay"].findings[0]
    assert qd.evidence["delay_p50_us"] == pytest.approx(3, abs=0.5) and "starves on the host" in qd.message

    ko = st["kernel_outliers"].findings[0]
    assert ko.evidence["kernel"] == "k0" and ko.evidence["outliers"] == 1 and ko.evidence["max_us"] == 2000

    co = st["comm_overlap"].findings[0]
    assert co.evidence["overlap_fraction"] == 0 and co.evidence["exposed_s"] > 0.01


def test_gpu_bound_run_quiet(traces):
    path = traces["gpu"]
    st = {cid: result(path, "wasm", cid) for cid in GPU_CHECKS}
    assert {cid: r.status for cid, r in st.items()} == dict.fromkeys(GPU_CHECKS, "ok"), st
    assert st["gpu_breakdown"].findings[0].evidence["idle_fraction"] < 0.1
    steps = [f for f in st["gpu_breakdown"].findings if "per step" in f.message]
    assert len(steps) == 1 and steps[0].evidence["idle_fraction"] < 0.05  # kernels span step boundaries
    assert st["gpu_queue_delay"].findings[0].evidence["delay_p50_us"] > 1000  # the queue in front of the GPU
    assert st["comm_overlap"].findings[0].evidence["overlap_fraction"] == 1


def test_gpu_checks_not_recorded_without_gpu_family(tmp_path):
    from test_query_check import cuda_trace
    path = cuda_trace(tmp_path / "cuda", False)
    by = {r.check.id: r for r in report(path, "wasm").results}
    for cid in GPU_CHECKS:
        assert by[cid].status == "not recorded", by[cid]
