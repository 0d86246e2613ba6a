"""Recording windows (issue 15): which ring records reach the raw log.

The proc family is always kept, so the process tree and thread names are
complete whenever recording is on; the other families' records are kept only
from the window's start.  The cut is by each record's own timestamp, not by
when a drain happened, so the edge is exact whatever the drain interval.
"""
from __future__ import annotations

import numpy as np

from . import events


class CaptureWindow:
    """Recording is on for records stamped at or after `start_ns` (CLOCK_BOOTTIME)."""

    def __init__(self, start_ns: int):
        self.start_ns = start_ns

    def keep(self, ring: int, data: bytes, stride: int) -> bytes:
        """The part of one drained batch to write: proc whole, others from the start."""
        if ring == events.RING_PROC or not data:
            return data
        rows = np.frombuffer(data, dtype=np.uint8)
        n = rows.size // stride
        rows = rows[: n * stride].reshape(n, stride)
        off = events.RINGBUF_HDR + events.RING_STRUCTS[ring][1].fields["ts"][1]
        ts = rows[:, off : off + 8].copy().view("<u8").ravel()
        if ts.size and ts[0] >= self.start_ns:  # on for the whole batch: no copy
            return data
        return rows[ts >= self.start_ns].tobytes()
