"""The recorder's gpu summary names a process whose CUPTI was active but sent no
GPU work: on an H200, torch.profiler inside a `-e gpu` recording took CUPTI's
activity buffers (CUPTI's buffer callbacks are per process) and the trace got 0
kernels with nothing said.  Fed through the receiver's sink (_HelloTap) with a
made-up clock."""
from __future__ import annotations

import types

from timeline.gpu import plugin as gpu_plugin


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def summary(events, counts, clock):
    """events: (time, meta) in order; counts: the receiver's per-pid record counts."""
    plugin = gpu_plugin.GpuPlugin(types.SimpleNamespace(pid=None))
    plugin.clock = clock
    tap = gpu_plugin._HelloTap(types.SimpleNamespace(write_meta=lambda obj: None), plugin.hellos,
                               plugin.lifetimes, clock=clock)
    for t, meta in events:
        clock.now = t
        tap.write_meta(meta)
    plugin.receiver = types.SimpleNamespace(counts=counts, other_counts={}, stats={}, bounds={},
                                            max_connections=0)
    return plugin


def hello(pid, active=True):
    return {"type": "gpu_hello", "pid": pid, "info": {"cuda_injection": True, "active": active}}


def exit_status(pid):
    return {"type": "gpu_status", "pid": pid, "info": {"when": "exit", "records_sent": 80}}


def test_active_cupti_without_gpu_work_is_named():
    clock = Clock()
    events = [(100, hello(10)), (100, hello(11)), (100, hello(12)), (100, hello(13, active=False)),
              (100.2, exit_status(12)),  # only initialised CUDA: gone after 0.2 s
              (105, exit_status(10)), (105, exit_status(11)), (109.5, hello(14))]
    counts = {10: {"nvtx": 80}, 11: {"kernel": 2880, "api": 3306, "nvtx": 80}}
    plugin = summary(events, counts, clock)
    clock.now = 110.0
    lines = plugin.summary_lines()
    quiet = [ln for ln in lines if "CUPTI active but no GPU activity arrived" in ln]
    assert quiet == ["gpu: pid 10: CUPTI active but no GPU activity arrived: another CUPTI user in the process "
                     "(torch.profiler, nsys) takes CUPTI's activity buffers; record without it"], lines
    assert "gpu: pid 10: 80 nvtx" in lines  # the counts line stays
    assert any(ln.startswith("gpu: pid 13: no GPU activity recorded") for ln in lines)  # inactive: said apart
    # pid 14 (no exit yet) is judged by how long it has run so far
    assert plugin.quiet_cupti_pids(counts, now=110.0) == [10]
    assert plugin.quiet_cupti_pids(counts, now=111.0) == [10, 14]
    # GPU work of any kind clears it
    for kind in gpu_plugin.GPU_WORK_RECORDS:
        assert 10 not in plugin.quiet_cupti_pids({**counts, 10: {kind: 1}}, now=110.0)
