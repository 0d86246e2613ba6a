"""What every ring shares: the Python mirror of timeline/bpf/events.h (ring id
range, loss counter layout) and the ring buffer record framing.

A family's own records (ring id, dtype, kinds) are in its dtype module beside
its code, mirroring its header (timeline/cuda/records.py mirrors
timeline/cuda/records.h); tests/unit/test_layout.py checks each against its header
and the BTF of the built objects.  This module names no family.
"""
from __future__ import annotations

import numpy as np

MAX_RINGS = 32    # ring ids are 1 .. MAX_RINGS - 1 (TL_MAX_RINGS)

# Per-CPU loss counters (map "drops"): group offset + ring id (TL_DROP_*)
DROP_FULL = 0 * MAX_RINGS     # records lost: the ring had no room
DROP_REFUSED = 1 * MAX_RINGS  # records lost: reserve failed twice with room left
DROP_RETRIED = 2 * MAX_RINGS  # reserves that failed with room left, then succeeded
DROP_FILL = 3 * MAX_RINGS     # most bytes pending at a refusal (a maximum)
DROP_SLOTS = 4 * MAX_RINGS

# Each ring buffer record is preceded by an 8-byte header (u32 len|flags,
# u32 page offset) and padded to 8 bytes.
RINGBUF_HDR = 8
RINGBUF_BUSY_BIT = 1 << 31
RINGBUF_DISCARD_BIT = 1 << 30


def ring_stride(dtype: np.dtype) -> int:
    """Bytes one record of `dtype` occupies in a BPF ring buffer."""
    return (dtype.itemsize + RINGBUF_HDR + 7) & ~7


def decode_ring_bytes(buf: bytes | memoryview | np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Decode raw ring-buffer bytes (headers included) into a record array.

    Discarded records are dropped.  `buf` must hold whole records.
    """
    stride = ring_stride(dtype)
    raw = np.frombuffer(buf, dtype=np.uint8)
    n = raw.size // stride
    if n == 0:
        return np.zeros(0, dtype=dtype)
    rows = raw[: n * stride].reshape(n, stride)
    hdr = rows[:, :4].copy().view("<u4").ravel()
    keep = (hdr & RINGBUF_DISCARD_BIT) == 0
    body = np.ascontiguousarray(rows[keep, RINGBUF_HDR : RINGBUF_HDR + dtype.itemsize])
    return body.view(dtype).ravel()


def display_text(b: bytes) -> str:
    """Bytes from the kernel (comm, argv, paths) as text for the trace: undecodable
    bytes become a literal \\xNN, the same form rawlog uses for META."""
    return b.decode("utf-8", "backslashreplace")


def cstr(b: bytes) -> str:
    """A fixed-size C char array field as str."""
    return display_text(b.split(b"\0", 1)[0])


def encode_ring_bytes(records: np.ndarray) -> bytes:
    """Inverse of decode_ring_bytes: lay records out as a BPF ring buffer would.

    Used by tests and tools that synthesize raw logs; the recorder itself only
    copies bytes.
    """
    dtype = records.dtype
    stride = ring_stride(dtype)
    out = np.zeros((records.size, stride), dtype=np.uint8)
    hdr = out[:, :4].view("<u4")
    hdr[:, 0] = dtype.itemsize
    out[:, RINGBUF_HDR : RINGBUF_HDR + dtype.itemsize] = records.view(np.uint8).reshape(records.size, dtype.itemsize)
    return out.tobytes()
