"""Python mirror of timeline/bpf/events.h: one numpy dtype per ring.

Kept in one place on purpose; tests/test_layout.py checks these dtypes against
the BTF of the built BPF objects (sizes and field offsets).
"""
from __future__ import annotations

import enum

import numpy as np

# Ring ids (TL_RING_*)
RING_SCHED = 1
RING_PROC = 2
MAX_RINGS = 32    # ring ids are 1 .. MAX_RINGS - 1 (TL_MAX_RINGS)

# Per-CPU loss counters (map "drops"): group offset + ring id (TL_DROP_*)
DROP_FULL = 0 * MAX_RINGS     # records lost: the ring had no room
DROP_REFUSED = 1 * MAX_RINGS  # records lost: reserve failed twice with room left
DROP_RETRIED = 2 * MAX_RINGS  # reserves that failed with room left, then succeeded
DROP_FILL = 3 * MAX_RINGS     # most bytes pending at a refusal (a maximum)
DROP_SLOTS = 4 * MAX_RINGS

# sched ring kinds / flags
SCHED_SWITCH = 1
SCHED_WAKING = 2
SF_PREV_TRACKED = 1
SF_NEXT_TRACKED = 2
SF_WAKEUP_NEW = 4
SF_LEFT_IDLE = 8  # switch: idle CPU starts an untracked task (see events.h)

# proc ring kinds / flags
PROC_FORK = 1
PROC_EXEC = 2
PROC_EXIT = 3
PROC_RENAME = 4
PF_THREAD = 1
PF_GROUP_DEAD = 2
PF_LAUNCHED = 4
PROC_DATA_LEN = 256

# ---- CUDA ring (TL_RING_CUDA, cuda.bpf.c): see events.h for the meaning ----
RING_CUDA = 3
CUDA_CALL = 1
CUDA_ENTRY = 2
CUDA_NAME = 3
CF_HAS_RET = 1
CF_OUT = 2
CF_TRUNC = 4
CK_ID_MASK = 4095
CK_OUT_SHIFT = 12
CK_STR_SHIFT = 16
CK_RUNTIME = 1 << 20
CK_DRIVER = 1 << 21
CK_STACK = 1 << 22
CK_CONFIG = 1 << 23
CK_LAUNCH = 1 << 24
# ---- end CUDA ----

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

CUDA_EVENT = np.dtype(
    [
        ("ts", "<u8"),
        ("dur", "<u8"),
        ("args", "<u8", (9,)),
        ("ret", "<u8"),
        ("out", "<u8"),
        ("cookie", "<u8"),
        ("tid", "<u4"),
        ("tgid", "<u4"),
        ("cpu", "<u2"),
        ("kind", "u1"),
        ("flags", "u1"),
        ("pad", "<u4"),
    ]
)


# ---- kernel context (issue 4): ioctl, block I/O, counters; see events.h ----
RING_IOCTL = 4
RING_BLOCK = 5
RING_COUNTERS = 6
IOCTL_CALL = 1
IOF_NVIDIA = 1
IOF_DETAIL = 2
IOF_XFER = 4
IOF_NOFILE = 8
IOCTL_NAME_LEN = 32
BLOCK_IO = 1
BF_SYNC = 1
BF_META = 2
BF_FUA = 4
BF_RAHEAD = 8
BF_PREFLUSH = 16
BF_PARTIAL = 32
COUNTERS_EXIT = 1

IOCTL_EVENT = np.dtype([
    ("ts", "<u8"), ("dur", "<u8"), ("ret", "<i8"), ("ino", "<u8"),
    ("tid", "<u4"), ("tgid", "<u4"), ("fd", "<u4"), ("request", "<u4"), ("rdev", "<u4"), ("detail", "<u4"),
    ("mode", "<u2"), ("cpu", "<u2"), ("kind", "u1"), ("flags", "u1"), ("esc", "<u2"),
    ("name", f"S{IOCTL_NAME_LEN}"), ("parent", f"S{IOCTL_NAME_LEN}"),
])
BLOCK_EVENT = np.dtype([
    ("ts", "<u8"), ("issue_ts", "<u8"), ("done_ts", "<u8"), ("sector", "<u8"),
    ("tid", "<u4"), ("tgid", "<u4"), ("dev", "<u4"), ("bytes", "<u4"),
    ("cpu", "<u2"), ("kind", "u1"), ("flags", "u1"), ("op", "u1"), ("status", "u1"), ("pad", "<u2"),
    ("disk", "S16"),
])
COUNTERS_EVENT = np.dtype([
    ("ts", "<u8"), ("utime_ns", "<u8"), ("stime_ns", "<u8"), ("min_flt", "<u8"), ("maj_flt", "<u8"),
    ("nvcsw", "<u8"), ("nivcsw", "<u8"), ("read_bytes", "<u8"), ("write_bytes", "<u8"),
    ("tid", "<u4"), ("tgid", "<u4"), ("cpu", "<u2"), ("kind", "u1"), ("flags", "u1"), ("pad", "<u4"),
])
# ---- end kernel context ----



# Record kinds per ring: the `kind` field's values, named as the recorder's
# summary names them.  The integers above are the ones events.h defines.
class SchedKind(enum.IntEnum):
    sched_switch = SCHED_SWITCH
    sched_waking = SCHED_WAKING


class ProcKind(enum.IntEnum):
    fork = PROC_FORK
    exec = PROC_EXEC
    exit = PROC_EXIT
    rename = PROC_RENAME


class CudaKind(enum.IntEnum):
    cuda_call = CUDA_CALL
    cuda_entry = CUDA_ENTRY
    cuda_name = CUDA_NAME


class IoctlKind(enum.IntEnum):
    ioctl = IOCTL_CALL


class BlockKind(enum.IntEnum):
    block_io = BLOCK_IO


class CountersKind(enum.IntEnum):
    thread_totals = COUNTERS_EXIT


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


def argv_of(rec) -> list[str]:
    """The argv carried by an exec record (possibly truncated)."""
    n = int(rec["data_len"])
    raw = bytes(rec["data"])[:n]
    parts = raw.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [display_text(p) for p in parts]


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
