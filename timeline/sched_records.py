"""Python mirror of timeline/sched_records.h: the sched family's ring.

sched_records.h is the one definition; tests/unit/test_layout.py checks this dtype
and these constants against it and against the BTF of sched.bpf.o.
"""
from __future__ import annotations

import enum

import numpy as np

RING_SCHED = 1

# kinds
SCHED_SWITCH = 1
SCHED_WAKING = 2
# flags
SF_PREV_TRACKED = 1
SF_NEXT_TRACKED = 2
SF_WAKEUP_NEW = 4
SF_LEFT_IDLE = 8  # switch: idle CPU starts an untracked task (see sched_records.h)

SCHED_EVENT = np.dtype(
    [
        ("ts", "<u8"),
        ("tid", "<u4"),
        ("target_tid", "<u4"),
        ("arg", "<i8"),
        ("prio", "<i4"),
        ("cpu", "<u2"),
        ("kind", "u1"),
        ("flags", "u1"),
    ]
)


class SchedKind(enum.IntEnum):
    """The `kind` field's values, named as the recorder's summary names them."""
    sched_switch = SCHED_SWITCH
    sched_waking = SCHED_WAKING
