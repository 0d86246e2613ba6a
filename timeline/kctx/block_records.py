"""Python mirror of timeline/kctx/block_records.h: the block family's ring.

block_records.h is the one definition; tests/unit/test_layout.py checks this dtype
and these constants against it and against the BTF of block.bpf.o.
"""
from __future__ import annotations

import enum

import numpy as np

RING_BLOCK = 5

BLOCK_IO = 1
BF_SYNC = 1
BF_META = 2
BF_FUA = 4
BF_RAHEAD = 8
BF_PREFLUSH = 16
BF_PARTIAL = 32

BLOCK_EVENT = np.dtype([
    ("ts", "<u8"), ("issue_ts", "<u8"), ("done_ts", "<u8"), ("sector", "<u8"),
    ("tid", "<u4"), ("tgid", "<u4"), ("dev", "<u4"), ("bytes", "<u4"),
    ("cpu", "<u2"), ("kind", "u1"), ("flags", "u1"), ("op", "u1"), ("status", "u1"), ("pad", "<u2"),
    ("disk", "S16"),
])


class BlockKind(enum.IntEnum):
    """The `kind` field's values, named as the recorder's summary names them."""
    block_io = BLOCK_IO
