"""Python mirror of timeline/kctx/counters_records.h: the counters family's ring.

counters_records.h is the one definition; tests/unit/test_layout.py checks this
dtype and these constants against it and against the BTF of counters.bpf.o.
"""
from __future__ import annotations

import enum

import numpy as np

RING_COUNTERS = 6

COUNTERS_EXIT = 1

COUNTERS_EVENT = np.dtype([
    ("ts", "<u8"), ("utime_ns", "<u8"), ("stime_ns", "<u8"), ("min_flt", "<u8"), ("maj_flt", "<u8"),
    ("nvcsw", "<u8"), ("nivcsw", "<u8"), ("read_bytes", "<u8"), ("write_bytes", "<u8"),
    ("tid", "<u4"), ("tgid", "<u4"), ("cpu", "<u2"), ("kind", "u1"), ("flags", "u1"), ("pad", "<u4"),
])


class CountersKind(enum.IntEnum):
    """The `kind` field's values, named as the recorder's summary names them."""
    thread_totals = COUNTERS_EXIT
