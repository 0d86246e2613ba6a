"""Descriptors of the memory-pressure and container-limit families: mem, cgroup.

mem: a BPF program (mem.bpf.c) with its record layout (mem_records.h,
mirrored by mem_records.py) beside this file.  cgroup: a sampler in the
recorder (plugins.py, cgroups.py) writing its records (cgroup_records.h)
itself, no BPF."""
from __future__ import annotations

from dataclasses import dataclass

from ..family import CheckData, Family, Ring, option
from ..kctx.family import SampleInterval
from . import cgroup_records, mem_records


@dataclass(frozen=True)
class CgroupOptions:
    cgroup_interval: float = option(0.5, "--cgroup-interval", type=SampleInterval(), metavar="S",
                                    help="cgroup family: seconds between samples of the recorded processes' "
                                         "cgroups (throttling, memory events, pressure; at least 0.01); 0 turns "
                                         "it off.")


MEM = Family(
    name="mem",
    help="memory-pressure stalls (direct/memcg reclaim, compaction) of the recorded threads and OOM kills",
    rings=(Ring(mem_records.RING_MEM, mem_records.MEM_EVENT, "tl_mem_event", mem_records.MemKind,
                "mem_ring", 1 << 18, header="memory/mem_records.h"),),
    bpf_object="mem.bpf.o",
    programs=("tl_mem_reclaim_begin", "tl_mem_reclaim_end", "tl_mem_memcg_begin", "tl_mem_memcg_end",
              "tl_mem_compact_begin", "tl_mem_compact_end", "tl_mem_oom_victim"),
    converters=("timeline.memory.convert_mem:MemConverter",),
    check_data=(CheckData("memory", "exists(select 1 from slice where category = 'memory')",
                          "memory-pressure stalls or OOM kills", categories=("memory",)),),
)

CGROUP = Family(
    name="cgroup",
    help="the recorded processes' cgroups, sampled: CPU throttling, memory events, pressure (PSI)",
    rings=(Ring(cgroup_records.RING_CGROUP, cgroup_records.CGROUP_SAMPLE_EVENT, "tl_cgroup_sample",
                cgroup_records.CgroupKind, header="memory/cgroup_records.h"),),
    options=CgroupOptions,
    plugin="timeline.memory.plugins:CgroupPlugin",
    converters=("timeline.memory.convert_cgroup:CgroupConverter",),
    check_data=(CheckData("cgroup", "exists(select 1 from counter_track where name glob 'cgroup *')",
                          "cgroup counters ('cgroup <cgroup> <counter>')", counters="cgroup *"),),
)
