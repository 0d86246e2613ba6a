"""Reading the recorded processes' cgroups: CPU throttling, memory events, pressure.

Which cgroups: each process's /proc/PID/cgroup, one line per hierarchy
("4:memory:/job/a" for v1, "0::/job/a" for v2), mapped onto the cgroup
mounts of our own mount table (/proc/self/mountinfo).  The files, per
hierarchy: v2 cpu.stat, memory.events, {cpu,memory,io}.pressure; v1 cpu.stat
(cpu), memory.failcnt and memory.oom_control (memory), and the pressure
files where a v1 hierarchy has them (cgroup1 PSI).

Security (docs/security.md): the path comes from the target, which may name
cgroups it created itself (a delegated subtree).  Root opens it one
component at a time relative to a held descriptor of the cgroup mount's root,
O_NOFOLLOW, checking that every directory and file is on that same mount
(st_dev) and that the file is regular; "." and ".." are refused.  cgroupfs
holds only kernel-made directories and control files (no symlinks, FIFOs or
user files can be created in it), so a hostile name can lead only to another
cgroup's counters, which any user may read.  This is used instead of
safe_input's open-as-the-user because it runs in the sampler thread (no fork
from a threaded recorder) and pins the reads to cgroupfs, which an
open-as-user would not.  Every read is bounded (READ_LIMIT), the number of
cgroups held too (MAX_CGROUPS).
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field

READ_LIMIT = 4096           # bytes per control file (cpu.stat is ~200)
PROC_CGROUP_LIMIT = 16384   # /proc/PID/cgroup: a line per hierarchy
MAX_CGROUPS = 64            # distinct cgroups sampled; more are counted, not read
V1_FILES = {"cpu": ("cpu.stat",), "memory": ("memory.failcnt", "memory.oom_control")}
PSI_FILES = ("cpu.pressure", "memory.pressure", "io.pressure")
V2_FILES = ("cpu.stat", "memory.events") + PSI_FILES
# the counters kept, by file; anything else in a file is ignored (bounded output)
CPU_STAT_KEYS = {"nr_periods": "cpu.nr_periods", "nr_throttled": "cpu.nr_throttled",
                 "throttled_usec": "cpu.throttled_usec"}
MEMORY_EVENTS = ("low", "high", "max", "oom", "oom_kill", "oom_group_kill")
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _unescape(s: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class MountLine:
    mountpoint: str
    root: str
    version: int                 # 1 or 2
    controllers: frozenset[str]  # v1: the superblock options (cpu, cpuacct, memory, name=systemd, ...)
    dev: tuple[int, int]


def parse_mountinfo(text: str) -> list[MountLine]:
    """The cgroup and cgroup2 mounts of a mountinfo text."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if "-" not in parts:
            continue
        sep = parts.index("-")
        if sep < 5 or len(parts) < sep + 3:
            continue
        fstype = parts[sep + 1]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        try:
            major, minor = (int(x) for x in parts[2].split(":"))
        except ValueError:
            continue
        opts = frozenset(parts[sep + 3].split(",")) if len(parts) > sep + 3 else frozenset()
        out.append(MountLine(_unescape(parts[4]), _unescape(parts[3]), 2 if fstype == "cgroup2" else 1,
                             opts if fstype == "cgroup" else frozenset(), (major, minor)))
    return out


def parse_proc_cgroup(text: str) -> list[tuple[tuple[str, ...], str]]:
    """/proc/PID/cgroup -> [(controllers, path)]; v2's line has no controllers."""
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        ctrls = tuple(c for c in parts[1].split(",") if c)
        if parts[0] == "0" and not ctrls:
            out.append(((), parts[2]))
        elif ctrls:
            out.append((ctrls, parts[2]))
    return out


def label(controllers: tuple[str, ...], path: str) -> str:
    """How a cgroup is named in the trace: the v2 path, or 'cpu,cpuacct:/path' for v1."""
    return f"{','.join(controllers)}:{path}" if controllers else path


def components(path: str) -> list[str] | None:
    """The path's names below the mount root, or None when one is not a plain name."""
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") or "\0" in p for p in parts):
        return None
    return parts


def parse_file(name: str, raw: bytes) -> dict[str, int]:
    """One control file's counters, by the names the trace uses."""
    out: dict[str, int] = {}
    text = raw.decode("ascii", "replace")
    if name == "memory.failcnt":
        try:
            out["memory.failcnt"] = int(text.split()[0])
        except (IndexError, ValueError):
            pass
        return out
    for line in text.splitlines():
        words = line.split()
        if name.endswith(".pressure"):
            if words and words[0] in ("some", "full"):
                total = next((w[6:] for w in words if w.startswith("total=")), None)
                if total is not None and total.isdigit():
                    out[f"{name}.{words[0]}_usec"] = int(total)
            continue
        if len(words) != 2 or not words[1].isdigit():
            continue
        k, v = words[0], int(words[1])
        if name == "cpu.stat":
            if k == "throttled_time":  # v1: ns
                out["cpu.throttled_usec"] = v // 1000
            elif k in CPU_STAT_KEYS:
                out[CPU_STAT_KEYS[k]] = v
        elif name == "memory.events" and k in MEMORY_EVENTS:
            out[f"memory.events.{k}"] = v
        elif name == "memory.oom_control" and k in ("oom_kill", "under_oom"):
            out[f"memory.{k}"] = v
    return out


@dataclass
class _Mount:
    line: MountLine
    fd: int
    st_dev: int


@dataclass
class _Cgroup:
    dir_fd: int
    files: dict[str, int] = field(default_factory=dict)  # name -> held descriptor


class CgroupReader:
    """The counters of the cgroups a set of processes is in, file descriptors held between samples."""

    def __init__(self, mountinfo: str | None = None):
        self.mounts: list[_Mount] = []
        self.cgroups: dict[str, _Cgroup] = {}
        self.unreadable: dict[str, str] = {}    # label -> why (said once)
        self.over_limit: set[str] = set()       # labels past MAX_CGROUPS
        for m in parse_mountinfo(mountinfo if mountinfo is not None else _read_mountinfo()):
            fd = _open_mount(m.mountpoint)
            if fd is None:
                continue
            st = os.fstat(fd)
            # the path must still be that mount (nothing mounted over it since)
            if (os.major(st.st_dev), os.minor(st.st_dev)) != m.dev or not stat.S_ISDIR(st.st_mode):
                os.close(fd)
                continue
            self.mounts.append(_Mount(m, fd, st.st_dev))

    def _mount_for(self, controllers: tuple[str, ...]) -> _Mount | None:
        for m in self.mounts:
            if not controllers and m.line.version == 2:
                return m
            if controllers and m.line.version == 1 and set(controllers) <= m.line.controllers:
                return m
        return None

    def cgroups_of(self, pid: int) -> list[tuple[str, _Mount, tuple[str, ...], str]]:
        """(label, mount, controllers, path) of each hierarchy of `pid` we can read counters from."""
        raw = _read_proc_cgroup(pid)
        out = []
        for ctrls, path in parse_proc_cgroup(raw.decode("utf-8", "replace") if raw else ""):
            if ctrls and not (set(ctrls) & set(V1_FILES)):
                continue  # a v1 hierarchy without cpu or memory (pids, freezer, name=systemd): nothing to read
            m = self._mount_for(ctrls)
            if m is not None:
                out.append((label(ctrls, path), m, ctrls, path))
        return out

    def _open(self, lab: str, m: _Mount, ctrls: tuple[str, ...], path: str) -> _Cgroup | None:
        root = m.line.root.rstrip("/")
        if root and not (path == root or path.startswith(root + "/")):
            return None  # outside what this mount shows
        names = components(path[len(root):])
        if names is None:
            self.unreadable[lab] = "not a plain cgroup path"
            return None
        try:
            dir_fd = _open_beneath(m.fd, names, m.st_dev)
        except OSError as e:
            self.unreadable[lab] = e.strerror or str(e)
            return None
        cg = _Cgroup(dir_fd)
        wanted = V2_FILES if not ctrls else tuple(f for c in ctrls for f in V1_FILES.get(c, ())) + PSI_FILES
        for name in wanted:
            try:
                cg.files[name] = _open_file(dir_fd, name, m.st_dev)
            except OSError as e:
                if e.errno != errno.ENOENT:
                    self.unreadable.setdefault(f"{lab} {name}", e.strerror or str(e))
        return cg

    def sample(self, pids) -> tuple[dict[str, dict[str, int]], dict[str, list[int]]]:
        """({label: {counter: value}}, {label: [pids]}) for the processes' cgroups."""
        members: dict[str, list[int]] = {}
        found: dict[str, tuple] = {}
        for pid in sorted(pids):
            for lab, m, ctrls, path in self.cgroups_of(pid):
                members.setdefault(lab, []).append(pid)
                found.setdefault(lab, (m, ctrls, path))
        values: dict[str, dict[str, int]] = {}
        # a cgroup no recorded process is in any more is still read: its last
        # counts (an OOM kill that ended its member) come after they left
        for lab in [*found, *(k for k in self.cgroups if k not in found)]:
            cg = self.cgroups.get(lab)
            if cg is None:
                m, ctrls, path = found[lab]
                if len(self.cgroups) >= MAX_CGROUPS:
                    self.over_limit.add(lab)
                    continue
                cg = self._open(lab, m, ctrls, path)
                if cg is None:
                    continue
                self.cgroups[lab] = cg
            v: dict[str, int] = {}
            for name, fd in list(cg.files.items()):
                try:
                    v.update(parse_file(name, os.pread(fd, READ_LIMIT, 0)))
                except OSError:  # the cgroup was removed (ENODEV): opened anew if it is back
                    self._drop(lab)
                    break
            if v:
                values[lab] = v
        return values, members

    def _drop(self, lab: str) -> None:
        cg = self.cgroups.pop(lab, None)
        if cg is not None:
            for fd in cg.files.values():
                os.close(fd)
            os.close(cg.dir_fd)

    def close(self) -> None:
        for lab in list(self.cgroups):
            self._drop(lab)
        for m in self.mounts:
            os.close(m.fd)
        self.mounts.clear()


def _read_mountinfo() -> str:
    with open("/proc/self/mountinfo", "rb") as f:
        return f.read(1 << 20).decode("utf-8", "replace")


def _read_proc_cgroup(pid: int) -> bytes:
    try:
        fd = os.open(f"/proc/{int(pid)}/cgroup", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, PROC_CGROUP_LIMIT)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _open_mount(mountpoint: str) -> int | None:
    try:
        return os.open(mountpoint, DIR_FLAGS)
    except OSError:
        return None


def _open_beneath(root_fd: int, names: list[str], st_dev: int) -> int:
    """A descriptor of the directory root_fd/names..., each step O_NOFOLLOW and on the mount st_dev."""
    fd = os.dup(root_fd)
    try:
        for name in names:
            nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
            st = os.fstat(fd)
            if st.st_dev != st_dev:
                raise OSError(errno.EXDEV, "leaves the cgroup filesystem", name)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_file(dir_fd: int, name: str, st_dev: int) -> int:
    """A control file of the cgroup dir_fd: regular, on the mount st_dev, never through a symlink."""
    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_dev != st_dev:
        os.close(fd)
        raise OSError(errno.EINVAL, "not a cgroup control file", name)
    return fd
