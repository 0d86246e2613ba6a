"""Descriptor of the pystack family: Python call stacks at CUDA synchronizing
calls and where a recorded Python thread blocks.

BPF program pystack.bpf.c and record layout records.h (mirrored by
records.py) are beside it; docs/python-stacks.md explains the design.
"""
from __future__ import annotations

from dataclasses import dataclass

import click

from ..family import MIB, CheckData, Family, Ring, option
from . import kernel_supported, records


@dataclass(frozen=True)
class PyStackOptions:
    py_wait_min_us: int = option(100, "--py-wait-min-us", type=click.IntRange(0, 10 ** 9), show_default=True,
                                 metavar="US",
                                 help="pystack family: a recorded Python thread's wait (sleep or block) gets a "
                                      "slice with its Python stack when it lasts at least this long.")
    py_launch_every: int = option(32, "--py-launch-every", type=click.IntRange(0, 2 ** 32 - 1), show_default=True,
                                  metavar="N",
                                  help="pystack family: take the Python stack of every Nth kernel or graph launch "
                                       "of each thread (its 1st, N+1st, ...), shown on the launch's slice; "
                                       "0: none, 1: all.")
    py_sample_hz: int = option(99, "--py-sample-hz", type=click.IntRange(0, 10_000), show_default=True, metavar="HZ",
                               help="pystack family: sample the Python stacks of recorded threads while they run, "
                                    "this many times per second of CPU time (a perf_event timer per CPU); 0: off. "
                                    "The trace shows them as per-thread samples and a flame graph.")


PYSTACK = Family(
    name="pystack",
    help="Python call stacks (CPython 3.10-3.13) at CUDA synchronizing calls and launches (1 in "
         "--py-launch-every), where threads block, and "
         "sampled on CPU (uprobes, sched_switch, perf_event; Linux >= 5.17)",
    rings=(Ring(records.RING_PYSTACK, records.PY_EVENT, "tl_py_event", records.PyKind, "py_ring", 4 * MIB,
                header="pystack/records.h"),),
    bpf_object="pystack.bpf.o",
    programs=("tl_py_switch", "tl_py_fork", "tl_py_exec"),
    plugin_programs=("tl_py_call", "tl_py_hook", "tl_py_sample", "tl_py_code_free"),
    prepare="timeline.pystack.attach:prepare",
    requires="Linux >= 5.17 (BTF tracepoints, task storage, uprobe attach cookies, bpf_loop)",
    supported=kernel_supported,
    options=PyStackOptions,
    # on by default: the budget is the step time while training (issue 6), and in the steady
    # state bench/overhead_accounting.py's cnn / mlp runs go from 0.51% / 0.76% added CPU to
    # 1.36% / 1.60% with it; what it adds once (naming the imports' stacks, ~0.17 CPU-s, and
    # code_dealloc traps, which fire at start-up and exit, not per step) is not step time
    default_on=True,
    plugin="timeline.pystack.plugin:PyStackPlugin",
    converters=("timeline.pystack.converter:PyStackConverter",),
    check_data=(CheckData("pystack", "exists(select 1 from cpu_profile_stack_sample) or exists(select 1 from perf_sample)",
                          "Python stack samples (the pystack family's timer samples, or its stacks at calls and waits)",
                          samples=True),),
)
