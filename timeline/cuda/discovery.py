"""Finding CUDA runtime, driver and NCCL libraries, before and during a run.

Uprobes attach per file (inode + offset) and fire in every process that maps
the file, even one that dlopen()s it after the probe was attached.  So the
recorder attaches, before launching, to every copy the target is likely to
load (its interpreter's site-packages nvidia/*/lib and torch/lib, the
ldconfig cache, --cuda-lib), then watches /proc/PID/maps for copies that
appear later (another venv, a conda env, a vendored copy).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

from .probes import DRIVER, NCCL, RUNTIME

# libcudart.so.12, libcudart-9335f6a2.so.12 (vendored by wheels), libcuda.so.1,
# libcuda.so.575.57.08, libnccl.so.2, ...  Not libcudadevrt, libcudnn, ...
_LIB_RE = re.compile(r"^lib(cudart|cuda|nccl)(-[0-9a-f]{8})?\.so(\.\d+)*$")
_API = {"cudart": RUNTIME, "cuda": DRIVER, "nccl": NCCL}


def lib_api(path: str) -> str | None:
    """The API a library file provides, judged by its name."""
    m = _LIB_RE.match(os.path.basename(path))
    return _API[m.group(1)] if m else None


def _python_of(command: list[str], env_path: str | None) -> str | None:
    """The Python interpreter a command runs: itself, or a script's shebang."""
    if not command:
        return None
    exe = command[0]
    if os.sep not in exe:
        exe = shutil.which(exe, path=env_path) or exe
    if not os.path.isfile(exe):
        return None
    if os.path.basename(exe).startswith("python"):
        return exe
    try:
        with open(exe, "rb") as f:
            first = f.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode("utf-8", "replace").split()
    if parts and os.path.basename(parts[0]) == "env" and len(parts) > 1:
        parts = [shutil.which(parts[1], path=env_path) or parts[1]]
    if parts and os.path.basename(parts[0]).startswith("python"):
        return parts[0]
    return None


def site_dirs(python: str) -> list[str]:
    """site-packages of an interpreter's prefix (venv, conda env or base), found
    from its path alone: running it could be slow or have side effects.  A
    venv sees its base interpreter's site-packages only when its pyvenv.cfg
    says include-system-site-packages = true."""
    prefix = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    prefixes = [prefix]
    cfg = os.path.join(prefix, "pyvenv.cfg")
    if os.path.exists(cfg):
        settings = {}
        for line in open(cfg, errors="replace"):
            k, _, v = line.partition("=")
            settings[k.strip()] = v.strip()
        if settings.get("include-system-site-packages", "").lower() == "true":
            if settings.get("home"):
                prefixes.append(os.path.dirname(settings["home"]))
            prefixes.append(os.path.dirname(os.path.dirname(os.path.realpath(python))))
    else:  # a symlink to the interpreter (python3 -> python3.11, a conda shim): its own prefix
        prefixes.append(os.path.dirname(os.path.dirname(os.path.realpath(python))))
    out = []
    for p in prefixes:
        for d in sorted(glob.glob(os.path.join(p, "lib*", "python3*", "site-packages"))):
            if d not in out:
                out.append(d)
    return out


def candidates_in(site: str) -> list[str]:
    pats = ["nvidia/*/lib/lib*.so*", "nvidia/*/lib64/lib*.so*", "torch/lib/lib*.so*"]
    return [p for pat in pats for p in glob.glob(os.path.join(site, pat)) if lib_api(p)]


def ldconfig_libs() -> list[str]:
    """CUDA libraries in the dynamic linker's cache."""
    exe = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    libs = []
    for line in out.splitlines():
        name, _, path = line.strip().partition(" => ")
        if path and "x86-64" in name and lib_api(path.strip()):
            libs.append(path.strip())
    return libs


def candidates(command: list[str] | None, env_path: str | None) -> list[str]:
    """Library files the target will probably load, before it starts."""
    found = []
    py = _python_of(command or [], env_path)
    if py:
        for site in site_dirs(py):
            found += candidates_in(site)
    found += ldconfig_libs()
    return found


def file_key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def read_maps(pid: int) -> str | None:
    try:
        # paths are bytes; surrogateescape keeps them exact (os.fsencode gives them back)
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape", newline="\n") as f:
            return f.read()
    except OSError:
        return None


def parse_maps(text: str, executable: bool = True) -> list[tuple[int, int, int, int, str]]:
    """File mappings, executable ones only by default: (start, end, file offset, inode, path)."""
    out = []
    for line in text.split("\n"):  # not splitlines(): \x1c, \x85 etc. may be in a name
        parts = line.split(None, 5)
        if len(parts) < 6 or ("x" if executable else "r") not in parts[1] or not parts[5].startswith("/"):
            continue
        start, _, end = parts[0].partition("-")
        out.append((int(start, 16), int(end, 16), int(parts[2], 16), int(parts[4]), parts[5]))
    return out


def process_path(pid: int, path: str, inode: int) -> str:
    """A path to the mapped file usable from here (the target may live in
    another mount namespace): the plain path if it is the same inode."""
    key = file_key(path)
    if key and key[1] == inode:
        return path
    return f"/proc/{pid}/root{path}"


ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
            "CUDA_VISIBLE_DEVICES")


def rank_env(pid: int) -> dict[str, str]:
    """Distributed-training variables of a process (torchrun and friends set them)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, _, v = item.partition(b"=")
        key = k.decode("utf-8", "replace")
        if key in ENV_KEYS:
            out[key] = v.decode("utf-8", "replace")
    return out
