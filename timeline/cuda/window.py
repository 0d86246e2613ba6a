"""What a capture window does with the cuda ring: its edges (cudaProfilerStart/Stop,
--capture-range cudaProfilerApi) and the records kept outside it.

Named by the descriptor (Family.always_keep) and used by the plugin while
recording; the conversion's cut (timeline/capture_cut.py) keeps the same rows."""
from __future__ import annotations

import numpy as np

from ..capture import field
from . import records as cuda_records
from .probes import PROBES, Role

# Probe ids (cookie & CK_ID_MASK) by what a window does with them; an unknown id
# maps to the trailing False.
_START = np.array([p.role == Role.PROFILER_START for p in PROBES] + [False])
_STOP = np.array([p.role == Role.PROFILER_STOP for p in PROBES] + [False])
# Kernel names and communicators come from calls made once (at library load,
# at communicator init): a window that starts later still needs them.
_ALWAYS = np.array([p.role in (Role.REGISTER_FUNCTION, Role.KERNEL_HANDLE, Role.FUNCTION_NAME,
                               Role.COMM_INIT, Role.COMM_SPLIT) for p in PROBES] + [False])


def _ids(rows) -> np.ndarray:
    ids = (field(rows, cuda_records.RING_CUDA, "cookie") & cuda_records.CK_ID_MASK).astype(np.int64)
    return np.minimum(ids, len(PROBES))


def profiler_marks(rows) -> list[tuple[int, bool]]:
    """(ts, on) edges in a batch of cuda records: on from a start call's entry,
    off at a stop call's entry."""
    ring = cuda_records.RING_CUDA
    ids = _ids(rows)
    calls = field(rows, ring, "kind") != cuda_records.CUDA_NAME
    on, off = _START[ids] & calls, _STOP[ids] & calls
    if not (on.any() or off.any()):
        return []
    ts = field(rows, ring, "ts")
    return sorted([(int(t), True) for t in ts[on]] + [(int(t), False) for t in ts[off]])


def always_keep(ring: int, rows):
    """Registrations, kernel names and communicators, whenever they were made."""
    if ring != cuda_records.RING_CUDA:
        return None
    return _ALWAYS[_ids(rows)] | (field(rows, ring, "kind") == cuda_records.CUDA_NAME)
