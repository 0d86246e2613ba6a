"""Recording windows (issue 15): which ring records reach the raw log.

The proc family is always kept, so the process tree and thread names are
complete whenever recording is on; the other families' records are kept only
inside the on-intervals (--delay, SIGUSR1 toggles).  The cut is by each
record's own timestamp, not by when a drain happened, so the edges are exact
whatever the drain interval.
"""
from __future__ import annotations

import numpy as np

from . import events
from .registry import RING_DTYPES

_OPEN = (1 << 64) - 1


class CaptureWindow:
    """On-intervals [start, end) on CLOCK_BOOTTIME; the last may be open."""

    def __init__(self, start_ns: int | None):
        """start_ns None: off until set() turns it on (a capture range)."""
        self.intervals: list[list[int]] = [] if start_ns is None else [[start_ns, _OPEN]]

    @property
    def start_ns(self) -> int:
        return self.intervals[0][0] if self.intervals else _OPEN

    def is_on(self, now_ns: int) -> bool:
        return any(a <= now_ns < b for a, b in self.intervals)

    def toggle(self, now_ns: int) -> bool:
        """Turn recording off if on at `now_ns`, else on; returns the new state."""
        if self.is_on(now_ns):
            self.intervals[-1][1] = now_ns
            return False
        # off: either before a pending (delayed) start, which this brings forward, or after a stop
        self.intervals = [iv for iv in self.intervals if iv[1] <= now_ns]
        self.intervals.append([now_ns, _OPEN])
        return True

    def set(self, ts: int, on: bool) -> bool:
        """Turn recording on or off from `ts` (a capture range's edge); False if it already was."""
        last = self.intervals[-1] if self.intervals else None
        is_open = last is not None and last[1] == _OPEN and last[0] <= ts
        if on == is_open:
            return False
        if on:
            self.intervals = [iv for iv in self.intervals if iv[0] < iv[1] and iv[1] <= ts]
            self.intervals.append([ts, _OPEN])
        else:
            last[1] = ts
        return True

    def keep(self, ring: int, data: bytes, stride: int) -> bytes:
        """The part of one drained batch to write: proc whole, others inside the intervals."""
        if ring == events.RING_PROC or not data:
            return data
        rows = np.frombuffer(data, dtype=np.uint8)
        n = rows.size // stride
        rows = rows[: n * stride].reshape(n, stride)
        off = events.RINGBUF_HDR + RING_DTYPES[ring].fields["ts"][1]
        ts = rows[:, off : off + 8].copy().view("<u8").ravel()
        a, b = self.intervals[-1] if self.intervals else (_OPEN, _OPEN)
        if ts.size and a <= ts.min() and ts.max() < b:  # the whole batch is on: no copy
            return data
        mask = np.zeros(ts.size, bool)
        for a, b in self.intervals:
            mask |= (ts >= a) & (ts < b)
        return rows[mask].tobytes()


def toggle_recording(consumer, ctx) -> None:
    """SIGUSR1: flip recording at this instant and note it in the raw log."""
    now = ctx.now_ns()
    with consumer.lock:  # the consumer reads the window under this lock
        if consumer.window is None:
            consumer.window = CaptureWindow(0)
        on = consumer.window.toggle(now)
    ctx.write_meta({"type": "capture", "on" if on else "off": now})
