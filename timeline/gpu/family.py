"""Descriptor of the gpu family: GPU-side activity (kernels, copies, memsets,
synchronizations) and NVTX ranges from CUPTI, through our injection library.

Not BPF: the library runs inside the target (CUDA_INJECTION64_PATH /
NVTX_INJECTION64_PATH) and sends whole CUPTI buffers over a socket; the
recorder plugin (timeline/gpu/plugin.py) stores them under ring 7
(timeline/gpu/records.h is the record layout).
"""
from __future__ import annotations

from ..family import Family, Ring
from . import records

GPU = Family(
    name="gpu",
    help="GPU kernels, copies and NVTX ranges (CUPTI injection; launched commands only)",
    rings=(Ring(records.RING_GPU, records.GPU_RECORD, "tl_gpu_record", records.GpuKind, header="gpu/records.h"),),
    requires="a launched command (not --pid) whose CUDA environment has libcupti",
    plugin="timeline.gpu.plugin:GpuPlugin",
    converters=("timeline.gpu.converter:GpuConverter",),
)
