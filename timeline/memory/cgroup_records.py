"""Python mirror of timeline/memory/cgroup_records.h: the cgroup family's ring
(records the sampler writes, laid out like a BPF ring), and the counter names."""
from __future__ import annotations

import enum

import numpy as np

RING_CGROUP = 30

CGROUP_SAMPLE = 1

CGROUP_SAMPLE_EVENT = np.dtype([("ts", "<u8"), ("value", "<u8"), ("cgroup", "<u4"), ("counter", "<u2"),
                                ("kind", "u1"), ("flags", "u1")])

# `counter` -> name (cgroups.parse_file's names); append only: raw logs keep the indices
COUNTERS = (
    "", "cpu.nr_periods", "cpu.nr_throttled", "cpu.throttled_usec",
    "memory.events.low", "memory.events.high", "memory.events.max", "memory.events.oom",
    "memory.events.oom_kill", "memory.events.oom_group_kill",
    "memory.failcnt", "memory.oom_kill", "memory.under_oom",
    "cpu.pressure.some_usec", "cpu.pressure.full_usec", "memory.pressure.some_usec",
    "memory.pressure.full_usec", "io.pressure.some_usec", "io.pressure.full_usec",
)
COUNTER_IDS = {name: i for i, name in enumerate(COUNTERS) if name}


class CgroupKind(enum.IntEnum):
    """The `kind` field's values, named as the recorder's summary names them."""
    cgroup_sample = CGROUP_SAMPLE
