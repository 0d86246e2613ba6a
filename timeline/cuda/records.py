"""Python mirror of timeline/cuda/records.h: the cuda family's ring (see the header for the meaning).

records.h is the one definition; tests/unit/test_layout.py checks this dtype and
these constants against it and against the BTF of cuda.bpf.o.
"""
from __future__ import annotations

import enum

import numpy as np

RING_CUDA = 3

# kinds
CUDA_CALL = 1
CUDA_ENTRY = 2
CUDA_NAME = 3
# flags
CF_HAS_RET = 1
CF_OUT = 2
CF_TRUNC = 4
# attach cookie
CK_ID_MASK = 4095
CK_OUT_SHIFT = 12
CK_STR_SHIFT = 16
CK_RUNTIME = 1 << 20
CK_DRIVER = 1 << 21
CK_STACK = 1 << 22
CK_CONFIG = 1 << 23
CK_LAUNCH = 1 << 24

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


class CudaKind(enum.IntEnum):
    """The `kind` field's values, named as the recorder's summary names them."""
    cuda_call = CUDA_CALL
    cuda_entry = CUDA_ENTRY
    cuda_name = CUDA_NAME
