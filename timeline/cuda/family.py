"""Descriptor of the cuda family: CUDA runtime, driver and NCCL calls (uprobes).

BPF program cuda.bpf.c and record layout records.h (mirrored by records.py) are beside it."""
from __future__ import annotations

from dataclasses import dataclass

import click

from ..family import MIB, CaptureRange, CheckData, Family, RankCount, Ring, option
from . import kernel_supported, records

CUDA_MODES = ("full", "entry-only")


class CaptureRangeType(click.ParamType):
    """--capture-range: none, or a kind some family provides (Family.capture_ranges)."""
    name = "capture range"

    def convert(self, value, param, ctx):
        from ..registry import CAPTURE_RANGES  # at parse time: the registry imports this module

        if value == "none" or (isinstance(value, str) and any(c.matches(value) for _, c in CAPTURE_RANGES)):
            return value
        kinds = ["none", *(c.kind + "NAME" if c.kind.endswith(":") else c.kind for _, c in CAPTURE_RANGES)]
        self.fail(f"{value!r}: expected {', '.join(kinds[:-1])} or {kinds[-1]}", param, ctx)


@dataclass(frozen=True)
class CudaOptions:
    cuda_libs: tuple[str, ...] = option((), "--cuda-lib", multiple=True, metavar="PATH",
                                        help="cuda family: also probe this CUDA runtime/driver/NCCL library "
                                             "(repeatable).")
    cuda_mode: str = option("full", "--cuda-mode", type=click.Choice(CUDA_MODES), show_default=True,
                            help="cuda family: entry-only records kernel launches without their return "
                                 "(lowest overhead).")
    capture_range: str = option("none", "--capture-range", type=CaptureRangeType(), show_default=True,
                                metavar="none|cudaProfilerApi|nvtx:NAME",
                                help="Record only between the target's cudaProfilerStart() and cudaProfilerStop() "
                                     "(or cuProfilerStart/Stop), as nsys --capture-range=cudaProfilerApi; or, "
                                     "with nvtx:NAME (gpu family), from the first NVTX range NAME's start to the "
                                     "last one's end (cut at conversion). The process tree is followed throughout.")


CUDA = Family(
    main_activity=True,
    name="cuda",
    help="CUDA runtime/driver and NCCL calls (uprobes; Linux >= 5.15)",
    rings=(Ring(records.RING_CUDA, records.CUDA_EVENT, "tl_cuda_event", records.CudaKind, "cuda_ring", 16 * MIB,
                header="cuda/records.h"),),
    bpf_object="cuda.bpf.o",
    plugin_programs=("tl_cuda_entry", "tl_cuda_enter", "tl_cuda_exit"),
    prepare="timeline.cuda.attach:prepare",
    requires="Linux >= 5.15 (uprobe attach cookies, task storage)",
    supported=kernel_supported,
    options=CudaOptions,
    plugin="timeline.cuda.plugin:CudaPlugin",
    converters=("timeline.cuda.converter:CudaConverter",),
    header_fields=(("cuda", dict),),  # the probe table and mode (CudaPlugin.header)
    capture_ranges=(CaptureRange("cudaProfilerApi"),),  # cut while recording (window.profiler_marks)
    always_keep="timeline.cuda.window:always_keep",
    check_data=(CheckData("cuda", "exists(select 1 from slice where category in ('cuda', 'cuda_driver', 'nccl'))",
                          "CUDA runtime/driver/NCCL call slices", categories=("cuda", "cuda_driver", "nccl")),),
    rank_counts=(RankCount("CUDA/NCCL calls", records.RING_CUDA, lambda recs: recs["kind"] != records.CUDA_NAME),),
    doctor="timeline.cuda.doctor:CudaDoctor",
)
