"""The gpu family's `timeline doctor` rows: its injection library (it loads no
BPF) and the GPUs NVML sees."""
from __future__ import annotations

import os

from ..doctor_checks import Check, FamilyDoctor


class GpuDoctor(FamilyDoctor):
    def without_bpf(self) -> list[Check]:
        return [check_injection_library()]

    def environment(self, python: str) -> list[Check]:
        return [check_nvml()]


def check_injection_library() -> Check:
    from .plugin import LIBRARY

    if os.path.isfile(LIBRARY):
        return Check("family gpu", True, f"injection library: {LIBRARY} (GPU activity of launched commands)")
    return Check("family gpu", False, f"injection library not built ({LIBRARY})",
                 "python -m timeline.bpf.build (needs pip install nvidia-cuda-cupti-cu12 for the headers)")


def check_nvml() -> Check:
    try:
        import pynvml as nv
    except ImportError:
        return Check("NVML / GPUs", False, "the nvidia-ml-py package is missing", "pip install nvidia-ml-py")
    try:
        nv.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return Check("NVML / GPUs", False, f"no NVML: {e}", "the NVIDIA driver (libnvidia-ml.so.1) for GPU counters")
    try:
        names = []
        for i in range(nv.nvmlDeviceGetCount()):
            n = nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(i))
            names.append(n.decode() if isinstance(n, bytes) else n)
        return Check("NVML / GPUs", bool(names), f"{len(names)} GPU(s): {', '.join(names)}" if names else "no GPUs",
                     "" if names else "no NVIDIA GPU is visible")
    finally:
        nv.nvmlShutdown()
