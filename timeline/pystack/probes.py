"""The CUDA calls whose Python stack is taken: those that make the CPU wait
for the GPU (synchronizations, blocking copies, frees) and NCCL collectives,
every one; kernel and graph launches, one in --py-launch-every per thread.
Synchronizing calls: runtime ones only, the driver calls they make inside
would take the same stack again (the cuda family folds them into the
runtime call's slice).  Launches: driver ones too (Triton launches through
cuLaunchKernelEx); BPF passes over one made inside a runtime launch.

Named from the cuda family's probe table (timeline/cuda/probes.py); the
record's cookie is that table's probe id, and the raw log header keeps
id -> name, so a log stays readable if the table changes.
"""
from __future__ import annotations

from ..cuda.probes import BY_NAME, DRIVER, PROBES, Probe, Role
from . import records as R

SYNC_NAMES = (
    "cudaStreamSynchronize", "cudaStreamSynchronize_ptsz", "cudaDeviceSynchronize", "cudaEventSynchronize",
    "cudaMemcpy", "cudaMemcpy_ptds", "cudaMemcpy2D", "cudaMemcpy2D_ptds", "cudaMemcpyPeer",
    "cudaFree", "cudaFreeHost",
)

STACK_PROBES = ([BY_NAME[n] for n in SYNC_NAMES] + [p for p in PROBES if p.role == Role.COLLECTIVE]
                + [p for p in PROBES if p.launch])


def cookie(p: Probe) -> int:
    """tl_py_call's attach cookie for p: its id, and whether it is a launch (and a driver one)."""
    ck = p.id
    if p.launch:
        ck |= R.PY_CK_LAUNCH | (R.PY_CK_DRIVER if p.api == DRIVER else 0)
    return ck


def table() -> dict[str, str]:
    """probe id -> function name, for the raw log header."""
    return {str(p.id): p.name for p in STACK_PROBES}
