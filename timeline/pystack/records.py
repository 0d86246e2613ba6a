"""Python mirror of timeline/pystack/records.h (see the header for the meaning).

records.h is the one definition; tests/unit/test_layout.py checks the ring's
dtype and these constants against it, tests/system/test_pystack_layouts.py the
other structs against the BTF of pystack.bpf.o.
"""
from __future__ import annotations

import enum

import numpy as np

RING_PYSTACK = 10

# kinds
PY_CALL = 1
PY_WAIT = 2
PY_SAMPLE = 3
# flags
PYF_TRUNC = 1
PYF_NO_STATE = 2
PYF_NO_FRAME = 4
PYF_FAULT = 8
PYF_EXEC = 16
PYF_HOOKED = 32  # a call's stack taken after the cuda program of the same hit: its slice starts before, or at its ts

PY_MAX_FRAMES = 64
PY_CK_ID_MASK = 4095
PY_CK_LAUNCH = 1 << 16
PY_CK_DRIVER = 1 << 17
PY_INSTR_PTR = 0
PY_INSTR_INDEX = 1
PY_NONE = 65535
PY_WINDOW = 80
PY_TSWIN = 256
PY_CHUNK = 16384
PY_FREE_STRIPES = 64

PY_FRAME = np.dtype([("code", "<u8"), ("instr", "<u4"), ("check", "<u4")])

PY_STACK = np.dtype(
    [
        ("stack_id", "<u8"),
        ("tgid", "<u4"),
        ("depth", "<u2"),
        ("flags", "u1"),
        ("pad", "u1"),
        ("frames", PY_FRAME, (PY_MAX_FRAMES,)),
    ]
)

# struct tl_py_proc, field by field (the plugin packs it for the py_procs map)
PY_PROC = np.dtype(
    [
        ("runtime", "<u8"),
        ("rt_interp_head", "<u2"),
        ("interp_next", "<u2"),
        ("interp_threads", "<u2"),
        ("ts_next", "<u2"),
        ("ts_thread_id", "<u2"),
        ("ts_frame", "<u2"),
        ("cframe_frame", "<u2"),
        ("fr_base", "<u2"),
        ("fr_code", "<u2"),
        ("fr_previous", "<u2"),
        ("fr_instr", "<u2"),
        ("fr_owner", "<u2"),
        ("co_base", "<u2"),
        ("co_firstlineno", "<u2"),
        ("co_version", "<u2"),
        ("co_name", "<u2"),
        ("co_filename", "<u2"),
        ("co_code", "<u2"),
        ("str_hash", "<u2"),
        ("instr_kind", "u1"),
        ("owner_skip", "u1"),
        ("ts_datastack", "<u2"),
        ("chunk_data", "<u2"),
        ("gen", "<u4"),
        ("code_cache", "u1"),
        ("pad", "u1"),
        ("str_length", "<u2"),
        ("str_state", "<u2"),
        ("str_ascii", "<u2"),
        ("str_compact", "<u2"),
        ("pad2", "u1", (2,)),
        ("frees", "<u4", (PY_FREE_STRIPES,)),
        ("pad3", "<u4"),
    ]
)

PY_EVENT = np.dtype(
    [
        ("ts", "<u8"),
        ("dur", "<u8"),
        ("stack_id", "<u8"),
        ("tid", "<u4"),
        ("tgid", "<u4"),
        ("cookie", "<u4"),
        ("cpu", "<u2"),
        ("kind", "u1"),
        ("flags", "u1"),
    ]
)


class PyKind(enum.IntEnum):
    """The `kind` field's values, named as the recorder's summary names them."""
    py_call_stack = PY_CALL
    py_wait_stack = PY_WAIT
    py_sample = PY_SAMPLE
