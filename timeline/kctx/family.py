"""Descriptors of the kernel-context families: ioctl, block, counters.

Each has its BPF program (ioctl.bpf.c) and its record layout (ioctl_records.h,
mirrored by ioctl_records.py) beside this file."""
from __future__ import annotations

from dataclasses import dataclass

import click

from ..family import MIB, CheckData, Family, Ring, option
from . import block_records, counters_records, ioctl_records

IOCTL_MODES = ("gpu", "all")


@dataclass(frozen=True)
class IoctlOptions:
    ioctl_mode: str = option("gpu", "--ioctl", type=click.Choice(IOCTL_MODES),
                             help="ioctl family: gpu records calls on NVIDIA devices and counts the rest; "
                                  "all records every ioctl.")


MIN_SAMPLE_INTERVAL = 0.01  # s: shorter, the sampler thread alone would take a core


def sample_interval_ok(seconds: float) -> bool:
    """0 (samplers off), or finite and at least MIN_SAMPLE_INTERVAL (nan fails both)."""
    return seconds == 0 or MIN_SAMPLE_INTERVAL <= seconds < float("inf")


class SampleInterval(click.ParamType):
    """--sample-interval, checked like --flush-interval (but 0 means off)."""
    name = "seconds"

    def convert(self, value, param, ctx):
        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not sample_interval_ok(v):
            self.fail(f"{value!r}: give a finite number of seconds, at least {MIN_SAMPLE_INTERVAL:g} "
                      "(0 turns the samplers off)", param, ctx)
        return v or 0.0


@dataclass(frozen=True)
class CountersOptions:
    sample_interval: float = option(0.5, "--sample-interval", type=SampleInterval(), metavar="S",
                                    help="counters family: seconds between RSS/CPU/fault (/proc) and GPU (NVML) "
                                         "samples (at least 0.01); 0 turns them off.")


IOCTL = Family(
    name="ioctl",
    help="ioctls on GPU devices (all ioctls with --ioctl all)",
    rings=(Ring(ioctl_records.RING_IOCTL, ioctl_records.IOCTL_EVENT, "tl_ioctl_event", ioctl_records.IoctlKind,
                "ioctl_ring", 4 * MIB, header="kctx/ioctl_records.h"),),
    bpf_object="ioctl.bpf.o",
    programs=("tl_ioctl_enter", "tl_ioctl_exit"),
    options=IoctlOptions,
    plugin="timeline.kctx.plugins:IoctlPlugin",
    converters=("timeline.kctx.convert_ioctl:IoctlConverter",),
    check_data=(CheckData("ioctl", "exists(select 1 from slice where category = 'ioctl')", "GPU-driver ioctl slices", categories=("ioctl",)),),
)

BLOCK = Family(
    name="block",
    help="block device requests (disk I/O) of the recorded threads",
    rings=(Ring(block_records.RING_BLOCK, block_records.BLOCK_EVENT, "tl_block_event", block_records.BlockKind,
                "block_ring", 2 * MIB, header="kctx/block_records.h"),),
    bpf_object="block.bpf.o",
    programs=("tl_blk_insert", "tl_blk_issue", "tl_blk_done"),
    converters=("timeline.kctx.convert_block:BlockConverter",),
    check_data=(CheckData("block_io", "exists(select 1 from slice where category = 'block_io')",
                          "block I/O request slices", categories=("block_io",)),),
)

COUNTERS = Family(
    name="counters",
    help="per-thread totals at exit, sampled RSS/CPU/faults and NVML GPU counters",
    rings=(Ring(counters_records.RING_COUNTERS, counters_records.COUNTERS_EVENT, "tl_counters_event",
                counters_records.CountersKind, "counters_ring", MIB // 4, header="kctx/counters_records.h"),),
    bpf_object="counters.bpf.o",
    programs=("tl_cnt_exit",),
    options=CountersOptions,
    plugin="timeline.kctx.plugins:CountersPlugin",
    converters=("timeline.kctx.convert_counters:CountersConverter",),
    check_data=(CheckData("gpu_counters", "exists(select 1 from counter_track where name glob 'gpu[0-9]*.*')",
                          "GPU counters (gpu<N>.utilization_pct, ...)", counters="gpu[0-9]*.*"),),
)
