"""Python mirror of timeline/bpf/events.h: one numpy dtype per ring.

Kept in one place on purpose; tests/test_layout.py checks these dtypes against
the BTF of the built BPF objects (sizes and field offsets).
"""
from __future__ import annotations

import numpy as np

# Ring ids (TL_RING_*)
RING_SCHED = 1
RING_PROC = 2
MAX_RINGS = 8

# sched ring kinds / flags
SCHED_SWITCH = 1
SCHED_WAKING = 2
SF_PREV_TRACKED = 1
SF_NEXT_TRACKED = 2
SF_WAKEUP_NEW = 4

# proc ring kinds / flags
PROC_FORK = 1
PROC_EXEC = 2
PROC_EXIT = 3
PROC_RENAME = 4
PF_THREAD = 1
PF_GROUP_DEAD = 2
PF_LAUNCHED = 4
PROC_DATA_LEN = 256

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

PROC_EVENT = np.dtype(
    [
        ("ts", "<u8"),
        ("tid", "<u4"),
        ("tgid", "<u4"),
        ("child_tid", "<u4"),
        ("child_tgid", "<u4"),
        ("exit_code", "<i4"),
        ("cpu", "<u2"),
        ("kind", "u1"),
        ("flags", "u1"),
        ("data_len", "<u4"),
        ("comm", "S16"),
        ("old_comm", "S16"),
        ("data", f"V{PROC_DATA_LEN}"),
        ("pad", "<u4"),
    ]
)

# C struct name for each ring's record, used by the layout test.
RING_STRUCTS = {
    RING_SCHED: ("tl_sched_event", SCHED_EVENT),
    RING_PROC: ("tl_proc_event", PROC_EVENT),
}
RING_NAMES = {RING_SCHED: "sched", RING_PROC: "proc"}

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


def cstr(b: bytes) -> str:
    """A fixed-size C char array field as str."""
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


def argv_of(rec) -> list[str]:
    """The argv carried by an exec record (possibly truncated)."""
    n = int(rec["data_len"])
    raw = bytes(rec["data"])[:n]
    parts = raw.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", "replace") for p in parts]


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
