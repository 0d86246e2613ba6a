"""Python mirror of timeline/kctx/ioctl_records.h: the ioctl family's ring.

ioctl_records.h is the one definition; tests/unit/test_layout.py checks this dtype
and these constants against it and against the BTF of ioctl.bpf.o.
"""
from __future__ import annotations

import enum

import numpy as np

RING_IOCTL = 4

IOCTL_CALL = 1
IOF_NVIDIA = 1
IOF_DETAIL = 2
IOF_XFER = 4
IOF_NOFILE = 8
IOCTL_NAME_LEN = 32

IOCTL_EVENT = np.dtype([
    ("ts", "<u8"), ("dur", "<u8"), ("ret", "<i8"), ("ino", "<u8"),
    ("tid", "<u4"), ("tgid", "<u4"), ("fd", "<u4"), ("request", "<u4"), ("rdev", "<u4"), ("detail", "<u4"),
    ("mode", "<u2"), ("cpu", "<u2"), ("kind", "u1"), ("flags", "u1"), ("esc", "<u2"),
    ("name", f"S{IOCTL_NAME_LEN}"), ("parent", f"S{IOCTL_NAME_LEN}"),
])


class IoctlKind(enum.IntEnum):
    """The `kind` field's values, named as the recorder's summary names them."""
    ioctl = IOCTL_CALL
