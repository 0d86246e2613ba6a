"""Python mirror of timeline/memory/mem_records.h: the mem family's ring.

mem_records.h is the one definition; tests/unit/test_layout.py checks this
dtype and these constants against it and against the BTF of mem.bpf.o.
"""
from __future__ import annotations

import enum

import numpy as np

RING_MEM = 31

MEM_DIRECT_RECLAIM = 1
MEM_MEMCG_RECLAIM = 2
MEM_COMPACTION = 3
MEM_OOM_KILL = 4

MF_VICTIM_TRACKED = 1
MF_KILLER_TRACKED = 2

MEM_EVENT = np.dtype([
    ("ts", "<u8"), ("end_ts", "<u8"), ("nr", "<u8"), ("gfp", "<u8"), ("maj_flt", "<u8"), ("min_flt", "<u8"),
    ("tid", "<u4"), ("tgid", "<u4"), ("by_tid", "<u4"), ("by_tgid", "<u4"), ("order", "<i4"),
    ("cpu", "<u2"), ("kind", "u1"), ("flags", "u1"), ("comm", "S16"),
])


class MemKind(enum.IntEnum):
    """The `kind` field's values, named as the recorder's summary names them."""
    direct_reclaim = MEM_DIRECT_RECLAIM
    memcg_reclaim = MEM_MEMCG_RECLAIM
    compaction = MEM_COMPACTION
    oom_kill = MEM_OOM_KILL
