"""The two families timeline is built on: proc (the process tree, always on)
and sched (context switches and wakeups).  Their records are converted by the
core converters (timeline/converters/model.py), not by a family converter."""
from __future__ import annotations

from . import events as ev
from .family import MIB, Family, Ring

PROC = Family(
    name="proc",
    help="process tree: fork, exec, exit, rename (always on)",
    rings=(Ring(ev.RING_PROC, ev.PROC_EVENT, "tl_proc_event", ev.ProcKind, "proc_ring", 1 * MIB),),
    bpf_object="proc.bpf.o",
    programs=("tl_fork", "tl_exec", "tl_exit", "tl_rename"),
    always_on=True,
    # DataLoader roles come from the process model alone (names, parentage)
    converters=("timeline.kctx.dataloader:DataLoaderConverter",),
)

SCHED = Family(
    name="sched",
    help="context switches and wakeups of the recorded threads",
    rings=(Ring(ev.RING_SCHED, ev.SCHED_EVENT, "tl_sched_event", ev.SchedKind, "sched_ring", 16 * MIB),),
    bpf_object="sched.bpf.o",
    programs=("tl_switch", "tl_waking", "tl_wakeup_new"),
)
