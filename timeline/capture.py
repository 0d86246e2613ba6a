"""Recording windows (issue 15): which ring records reach the raw log.

The process tree (the always-on family's rings, registry.UNCUT_RINGS) is
always kept, so the process tree and thread names are complete whenever
recording is on; the other families' records are kept only inside the
on-intervals (--delay, SIGUSR1 toggles, a --capture-range).  The cut is by
each record's own timestamp (its ring's `ts_field`), not by when a drain
happened, so the edges are exact whatever the drain interval.
"""
from __future__ import annotations

import numpy as np

from . import events
from .errors import UserError
from .rawlog import KIND_META, KIND_RING
from .registry import CAPTURE_RANGE_OWNER, RING_DTYPES, RINGS, UNCUT_RINGS, capture_range_kind, capture_range_of

_OPEN = (1 << 64) - 1
NEVER = _OPEN  # CaptureWindow(NEVER): off until something turns it on (a capture range)


class CaptureWindow:
    """On-intervals [start, end) on CLOCK_BOOTTIME; the last may be open."""

    def __init__(self, start_ns: int):
        self.intervals: list[list[int]] = [[start_ns, _OPEN]]

    @property
    def start_ns(self) -> int:
        return self.intervals[0][0]

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

    def set_on(self, ts: int) -> None:
        """Recording on from ts (a capture range's start); no change if already on."""
        if not self.is_on(ts):
            self.toggle(ts)

    def set_off(self, ts: int) -> None:
        """Recording off from ts (a capture range's end); no change if already off."""
        if self.is_on(ts):
            self.toggle(ts)

    def keep(self, ring: int, data: bytes, stride: int, always=None) -> bytes:
        """The part of one drained batch to write: the process tree whole, others
        inside the intervals, plus the rows `always(ring, rows)` marks (a family's
        bookkeeping that later records need: Family.always_keep)."""
        if ring in UNCUT_RINGS or not data:
            return data
        rows = as_rows(data, stride)
        ts = field(rows, ring, RINGS[ring].ts_field)
        a, b = self.intervals[-1]
        if ts.size and a <= ts.min() and ts.max() < b:  # the whole batch is on: no copy
            return data
        mask = np.zeros(ts.size, bool)
        for a, b in self.intervals:
            mask |= (ts >= a) & (ts < b)
        if always is not None and not mask.all():
            extra = always(ring, rows)
            if extra is not None:
                mask |= extra
        return rows[mask].tobytes()


def as_rows(data: bytes, stride: int) -> np.ndarray:
    """A drained batch as an (n, stride) byte array (ring headers included)."""
    rows = np.frombuffer(data, dtype=np.uint8)
    n = rows.size // stride
    return rows[: n * stride].reshape(n, stride)


def field(rows: np.ndarray, ring: int, name: str) -> np.ndarray:
    """One field of every row of a drained batch, as its own dtype."""
    dt, off = RING_DTYPES[ring].fields[name][:2]
    off += events.RINGBUF_HDR
    return rows[:, off : off + dt.itemsize].copy().view(dt).ravel()


def toggle_recording(consumer, ctx) -> None:
    """SIGUSR1: flip recording at this instant and note it in the raw log."""
    now = ctx.now_ns()
    with consumer.lock:  # the consumer reads the window under this lock
        if consumer.window is None:
            consumer.window = CaptureWindow(0)
        on = consumer.window.toggle(now)
    ctx.write_meta({"type": "capture", "on" if on else "off": now})


def timed_strides(header: dict) -> dict[int, int]:
    """Ring id -> stride, from a raw log's header, of the rings a window can cut
    (their records carry their ring's timestamp field)."""
    return {int(k): v["stride"] for k, v in header.get("rings", {}).items()
            if int(k) in RINGS and RINGS[int(k)].ts_field in (RING_DTYPES[int(k)].names or ())}


def copy_cut(out, blk, window: CaptureWindow, strides: dict[int, int], always=None) -> None:
    """Copy one META or RING block of a raw log to the writer `out`; the event
    records of a RING block (the process tree whole) only inside `window`, plus `always`'s."""
    if blk.kind == KIND_RING and blk.ring not in UNCUT_RINGS and blk.ring in strides:
        data = window.keep(blk.ring, blk.payload, strides[blk.ring], always)
        if data:
            out.write_ring(blk.ring, data)
    elif blk.kind in (KIND_META, KIND_RING):
        out.write_block(blk.kind, blk.payload, blk.ring)


def check_capture_range(cfg) -> None:
    """Preflight: the `--capture-range` value's families are recorded (the one
    whose option it is, the one providing its kind), and a kind only a launched
    command has is not asked of --pid."""
    rng = capture_range_of(cfg)
    if rng == "none":
        return
    if CAPTURE_RANGE_OWNER not in cfg.events:
        raise UserError(f"--capture-range {rng} needs the {CAPTURE_RANGE_OWNER} family (-e ...,{CAPTURE_RANGE_OWNER})")
    found = capture_range_kind(rng)
    if found is None:  # the option's own type lets only known kinds through
        raise UserError(f"--capture-range {rng}: no family provides it")
    fam, kind = found
    if fam.name not in cfg.events or (kind.launched_only and cfg.pid):
        raise UserError(f"--capture-range {rng} needs the {fam.name} family (-e ...,{fam.name})"
                        + (", which only a launched command has" if kind.launched_only else ""))
