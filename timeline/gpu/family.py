"""Descriptor of the gpu family: GPU-side activity (kernels, copies, memsets,
synchronizations) and NVTX ranges from CUPTI, through our injection library.

Not BPF: the library runs inside the target (CUDA_INJECTION64_PATH /
NVTX_INJECTION64_PATH) and sends whole CUPTI buffers over a socket; the
recorder plugin (timeline/gpu/plugin.py) stores them under ring 7
(timeline/gpu/records.h is the record layout).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..family import CaptureRange, CheckData, Family, Ring, option
from . import records


@dataclass(frozen=True)
class GpuOptions:
    gpu_sync: bool = option(False, "--gpu-sync", is_flag=True,
                            help="gpu family: also CUPTI's synchronization records (the GPU side of each "
                                 "stream/event/device sync). Off by default: on an H200 they were most of the "
                                 "family's cost (docs/gpu-validation.md); the cuda family records the sync calls.")

GPU = Family(
    main_activity=True,
    name="gpu",
    help="GPU kernels, copies and NVTX ranges (CUPTI injection; launched commands only)",
    # CUPTI records are timed by their start (and run on no CPU of ours)
    rings=(Ring(records.RING_GPU, records.GPU_RECORD, "tl_gpu_record", records.GpuKind, header="gpu/records.h",
                ts_field="start"),),
    requires="a launched command (not --pid) whose CUDA environment has libcupti",
    options=GpuOptions,
    plugin="timeline.gpu.plugin:GpuPlugin",
    converters=("timeline.gpu.converter:GpuConverter",),
    # nvtx:NAME: ranges reach the recorder when they end, so the window is known
    # only afterwards: cut at conversion (nvtx_range.py)
    capture_ranges=(CaptureRange("nvtx:", launched_only=True, window="timeline.gpu.nvtx_range:window"),),
    check_data=(CheckData("gpu", "exists(select 1 from slice where category in ('gpu_kernel', 'gpu_memcpy', "
                                 "'gpu_memset'))",
                          "GPU activity (kernel/copy/memset slices of the gpu family)",
                          categories=("gpu_kernel", "gpu_memcpy", "gpu_memset")),),
    doctor="timeline.gpu.doctor:GpuDoctor",
)
