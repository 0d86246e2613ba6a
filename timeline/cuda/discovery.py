"""Finding CUDA runtime, driver and NCCL libraries, before and during a run.

Uprobes attach per file (inode + offset) and fire in every process that maps
the file, even one that dlopen()s it after the probe was attached.  So the
recorder attaches, before launching, to every copy the target is likely to
load (its interpreter's site-packages nvidia/*/lib and torch/lib, the
ldconfig cache, --cuda-lib), then watches /proc/PID/maps for copies that
appear later (another venv, a conda env, a vendored copy).

Every file named here is the target's (its executable, its venv's
pyvenv.cfg, a mapped library, even in a mount namespace of its own): it is
opened as the user the target runs as (safe_input: no symlink at the last
component, no blocking open, regular files only) and read with a bound, so a
FIFO or a root-only file in its place costs one warning at most.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

from ..safe_input import open_inputs, read_file
from .probes import DRIVER, NCCL, RUNTIME

SHEBANG_BYTES = 256
PYVENV_CFG_BYTES = 64 << 10   # a real pyvenv.cfg is a few lines

# libcudart.so.12, libcudart-9335f6a2.so.12 (vendored by wheels), libcuda.so.1,
# libcuda.so.575.57.08, libnccl.so.2, ...  Not libcudadevrt, libcudnn, ...
_LIB_RE = re.compile(r"^lib(cudart|cuda|nccl)(-[0-9a-f]{8})?\.so(\.\d+)*$")
_API = {"cudart": RUNTIME, "cuda": DRIVER, "nccl": NCCL}


def lib_api(path: str) -> str | None:
    """The API a library file provides, judged by its name."""
    m = _LIB_RE.match(os.path.basename(path))
    return _API[m.group(1)] if m else None


def _python_of(command: list[str], env_path: str | None, user=None) -> str | None:
    """The Python interpreter a command runs: itself, or a script's shebang
    (read as `user`, the first line only)."""
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
        first = read_file(os.path.realpath(exe), user, limit=SHEBANG_BYTES, whole=False).split(b"\n", 1)[0]
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


def site_dirs(python: str, user=None) -> list[str]:
    """site-packages of an interpreter's prefix (venv, conda env or base), found
    from its path alone: running it could be slow or have side effects.  A
    venv sees its base interpreter's site-packages only when its pyvenv.cfg
    (read as `user`, its first 64 KiB) says include-system-site-packages = true."""
    prefix = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    prefixes = [prefix]
    cfg = os.path.join(prefix, "pyvenv.cfg")
    if os.path.exists(cfg):
        settings = {}
        try:
            text = read_file(os.path.realpath(cfg), user, limit=PYVENV_CFG_BYTES, whole=False)
        except OSError:
            text = b""
        for line in text.decode("utf-8", "replace").splitlines():
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


def candidates(command: list[str] | None, env_path: str | None, user=None) -> list[str]:
    """Library files the target will probably load, before it starts."""
    found = []
    py = _python_of(command or [], env_path, user)
    if py:
        for site in site_dirs(py, user):
            found += candidates_in(site)
    found += ldconfig_libs()
    return found


def open_libs(paths: list[str], user=None, resolve: bool = True) -> list:
    """Per path, a read-only descriptor on the library file or the OSError it
    gave: opened as `user` in one go (one fork in sudo mode), as a regular
    file only.  resolve: a symlink (libcuda.so.1 -> libcuda.so.5xx) is
    resolved first and what it ends at is opened without following anything
    more (maps paths are resolved already, and /proc/PID/root must stay a
    way into the process's own mount namespace)."""
    return open_inputs([os.path.realpath(p) if resolve else p for p in paths], user)


MAPS_BYTES = 64 << 20     # /proc/PID/maps (a torch process: ~200 KiB); past it, the rest is not read
ENVIRON_BYTES = 4 << 20   # /proc/PID/environ; the rank variables are looked for in this much


def _read_proc(path: str, limit: int) -> bytes | None:
    """Up to `limit` bytes of a /proc file (the kernel's, but its size is the target's doing)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        parts, got = [], 0
        while got < limit:
            chunk = os.read(fd, min(1 << 20, limit - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_maps(pid: int) -> str | None:
    raw = _read_proc(f"/proc/{pid}/maps", MAPS_BYTES)
    if raw is None:
        return None
    if len(raw) >= MAPS_BYTES:
        raw = raw[: raw.rfind(b"\n") + 1]  # a line cut in two would name another file
    # paths are bytes; surrogateescape keeps them exact (os.fsencode gives them back)
    return raw.decode("utf-8", "surrogateescape")


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


def root_path(pid: int, path: str) -> str:
    """The mapped file's path as the process sees it (it may live in a mount
    namespace of its own, where the plain path names another file or none)."""
    return f"/proc/{pid}/root{path}"


ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
            "CUDA_VISIBLE_DEVICES")


def rank_env(pid: int) -> dict[str, str]:
    """Distributed-training variables of a process (torchrun and friends set them)."""
    raw = _read_proc(f"/proc/{pid}/environ", ENVIRON_BYTES)
    if raw is None:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, _, v = item.partition(b"=")
        key = k.decode("utf-8", "replace")
        if key in ENV_KEYS:
            out[key] = v.decode("utf-8", "replace")
    return out
