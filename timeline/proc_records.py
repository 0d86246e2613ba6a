"""Python mirror of timeline/proc_records.h: the proc family's ring (the process tree).

proc_records.h is the one definition; tests/unit/test_layout.py checks this dtype
and these constants against it and against the BTF of proc.bpf.o.
"""
from __future__ import annotations

import enum

import numpy as np

from .events import display_text

RING_PROC = 2

# kinds
PROC_FORK = 1
PROC_EXEC = 2
PROC_EXIT = 3
PROC_RENAME = 4
# flags
PF_THREAD = 1
PF_GROUP_DEAD = 2
PF_LAUNCHED = 4
PROC_DATA_LEN = 256

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


class ProcKind(enum.IntEnum):
    """The `kind` field's values, named as the recorder's summary names them."""
    fork = PROC_FORK
    exec = PROC_EXEC
    exit = PROC_EXIT
    rename = PROC_RENAME


def argv_of(rec) -> list[str]:
    """The argv carried by an exec record (possibly truncated)."""
    n = int(rec["data_len"])
    raw = bytes(rec["data"])[:n]
    parts = raw.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [display_text(p) for p in parts]
