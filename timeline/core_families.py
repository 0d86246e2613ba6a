"""The two families timeline is built on: proc (the process tree, always on)
and sched (context switches and wakeups).  Their records are converted by the
core converters (timeline/converters/model.py), not by a family converter.
Their BPF programs are timeline/bpf/proc.bpf.c and sched.bpf.c; their records
proc_records.h/.py and sched_records.h/.py here."""
from __future__ import annotations

from . import proc_records, sched_records
from .family import MIB, Family, Ring

PROC = Family(
    name="proc",
    help="process tree: fork, exec, exit, rename (always on)",
    rings=(Ring(proc_records.RING_PROC, proc_records.PROC_EVENT, "tl_proc_event", proc_records.ProcKind,
                "proc_ring", 1 * MIB, header="proc_records.h"),),
    bpf_object="proc.bpf.o",
    programs=("tl_fork", "tl_exec", "tl_exit", "tl_rename"),
    always_on=True,
    # DataLoader roles come from the process model alone (names, parentage)
    converters=("timeline.kctx.dataloader:DataLoaderConverter",),
)

SCHED = Family(
    name="sched",
    help="context switches and wakeups of the recorded threads",
    rings=(Ring(sched_records.RING_SCHED, sched_records.SCHED_EVENT, "tl_sched_event", sched_records.SchedKind,
                "sched_ring", 16 * MIB, header="sched_records.h"),),
    bpf_object="sched.bpf.o",
    programs=("tl_switch", "tl_waking", "tl_wakeup_new"),
)
