"""Device and file naming for kernel-context records.

An ioctl record carries what BPF can read cheaply about the fd's file: the
device number, the file type bits, the inode number and the last two dentry
names.  The full path of a device node comes from a /dev snapshot the
recorder writes into the raw log (device nodes can be named anything; the
kernel only knows their numbers), the rest is composed from the names.
"""
from __future__ import annotations

import os
import stat

S_IFMT, S_IFSOCK, S_IFIFO, S_IFCHR, S_IFBLK, S_IFREG = 0o170000, 0o140000, 0o010000, 0o020000, 0o060000, 0o100000
PTS_MAJORS = range(136, 144)  # UNIX98_PTY_SLAVE_MAJOR .. +7


def kdev(dev: int) -> tuple[int, int]:
    """Kernel-internal dev_t (major << 20 | minor) -> (major, minor)."""
    return dev >> 20, dev & 0xFFFFF


def scan_dev(root: str = "/dev", depth: int = 2) -> dict[str, str]:
    """'major:minor' -> path for the char and block device nodes under root."""
    out: dict[str, str] = {}

    def walk(d: str, left: int) -> None:
        try:
            entries = list(os.scandir(d))
        except OSError:
            return
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                key = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
                # Prefer the shortest name (/dev/null over /dev/some/alias).
                if key not in out or len(e.path) < len(out[key]):
                    out[key] = e.path
            elif stat.S_ISDIR(st.st_mode) and left > 0 and e.name not in ("fd", "shm", "mqueue", "hugepages"):
                walk(e.path, left - 1)

    walk(root, depth)
    return out


def file_path(mode: int, rdev: int, ino: int, name: str, parent: str, devices: dict[str, str]) -> str:
    """Best path for an fd's file, as /proc/PID/fd would show it where possible."""
    kind = mode & S_IFMT
    if kind in (S_IFCHR, S_IFBLK):
        major, minor = kdev(rdev)
        known = devices.get(f"{major}:{minor}")
        # The snapshot names the node by number; trust it when the dentry
        # agrees (a node elsewhere with the same numbers keeps its own name).
        if known and os.path.basename(known) == name:
            return known
        if major in PTS_MAJORS and name.isdigit():
            return f"/dev/pts/{name}"
        if known and not name:
            return known
    if kind == S_IFSOCK:
        return f"socket:[{ino}]"
    if kind == S_IFIFO and not name:
        return f"pipe:[{ino}]"
    if name.startswith("[") or (name and not parent and not kind):
        return f"anon_inode:{name}"
    if not name:
        return ""
    if parent in ("", "/"):
        return "/" + name
    return f"…/{parent}/{name}"  # two components are all BPF reads: the rest is unknown

