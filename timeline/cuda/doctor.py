"""The cuda family's `timeline doctor` rows: the kernel it needs, uprobe_multi,
and the CUDA runtime/driver/NCCL/CUPTI libraries where `record` looks for them."""
from __future__ import annotations

import glob
import os
import re

from ..doctor_checks import Check, FamilyDoctor

UPROBE_MULTI_FALLBACK = "the cuda family uses one uprobe per function (slower to detach)"
_CUPTI_RE = re.compile(r"^libcupti(-[0-9a-f]{8})?\.so(\.\d+)*$")


class CudaDoctor(FamilyDoctor):
    def unsupported(self) -> Check:
        return Check(self.row_name, False, "needs uprobe attach cookies", "Linux >= 5.15")

    def loaded(self, session) -> list[Check]:
        return [check_uprobe_multi(session)]

    def environment(self, python: str) -> list[Check]:
        return check_libraries(python)


def check_uprobe_multi(session) -> Check:
    """uprobe_multi links (Linux >= 6.6) make CUDA probes quick to attach and
    detach.  `session` has the cuda family loaded (its programs prepared as
    uprobe_multi programs where the kernel version says they exist)."""
    from .. import libbpf
    from . import attach

    obj = session.objects["cuda"]
    if not getattr(obj, "uprobe_multi", False):
        return Check("uprobe_multi", False, f"not used on Linux {os.uname().release}: {UPROBE_MULTI_FALLBACK}",
                     "Linux >= 6.6")
    # A link on a directory: a kernel that knows uprobe_multi refuses the path
    # (EBADF); one that does not refuses the attach type (EINVAL).
    try:
        link = attach._multi_link(obj, "tl_cuda_entry", "/", [0], [0], False)
    except libbpf.BPFError as e:
        msg = str(e).splitlines()[0]
        if "Bad file descriptor" in msg:
            return Check("uprobe_multi", True, "supported")
        return Check("uprobe_multi", False, f"{msg}: {UPROBE_MULTI_FALLBACK}", "Linux >= 6.6")
    link.destroy()
    return Check("uprobe_multi", True, "supported")


def _libraries(python: str) -> dict[str, tuple[list[str], list[str]]]:
    """api -> (copies in the interpreter's environment, copies in ldconfig's cache)."""
    from . import discovery
    from .probes import DRIVER, NCCL, RUNTIME

    sites = discovery.site_dirs(python)
    env = [p for s in sites for p in discovery.candidates_in(s)]
    system = discovery.ldconfig_libs()
    out = {}
    for api in (RUNTIME, DRIVER, NCCL):
        out[api] = (sorted({p for p in env if discovery.lib_api(p) == api}),
                    sorted({p for p in system if discovery.lib_api(p) == api}))
    pats = ["nvidia/*/lib/libcupti*.so*", "nvidia/*/lib64/libcupti*.so*", "nvidia/*/*/lib/libcupti*.so*"]
    cupti_env = {p for s in sites for pat in pats for p in glob.glob(os.path.join(s, pat))
                 if _CUPTI_RE.match(os.path.basename(p))}
    out["CUPTI"] = (sorted(cupti_env), sorted(set(_ldconfig_matching(_CUPTI_RE))))
    return out


def _ldconfig_matching(rx: re.Pattern) -> list[str]:
    import shutil
    import subprocess

    exe = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        text = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    out = []
    for line in text.splitlines():
        name, _, path = line.strip().partition(" => ")
        if path and "x86-64" in name and rx.match(os.path.basename(path.strip())):
            out.append(path.strip())
    return out


def _short(paths: list[str]) -> str:
    return paths[0] + (f" (+{len(paths) - 1} more)" if len(paths) > 1 else "")


def check_libraries(python: str) -> list[Check]:
    from .probes import DRIVER, NCCL, RUNTIME

    fixes = {
        RUNTIME: "a CUDA build of PyTorch (or pip install nvidia-cuda-runtime-cu12) in that environment",
        DRIVER: "the NVIDIA driver (libcuda.so.1); without it there is no GPU work to see",
        NCCL: "only for multi-GPU training: pip install nvidia-nccl-cu12 (CUDA builds of PyTorch bring it)",
        "CUPTI": "pip install nvidia-cuda-cupti-cu12 (CUDA builds of PyTorch bring it)",
    }
    names = {RUNTIME: "CUDA runtime", DRIVER: "CUDA driver", NCCL: "NCCL", "CUPTI": "CUPTI"}
    out = []
    for api, (env, system) in _libraries(python).items():
        found = [f"env: {_short(env)}"] if env else []
        found += [f"system: {_short(system)}"] if system else []
        out.append(Check(names[api], bool(found), "; ".join(found) or "none in the environment or ldconfig",
                         fixes[api] + ("" if found else "; check another Python with --python PATH")))
    return out
