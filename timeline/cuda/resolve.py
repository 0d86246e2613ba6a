"""Naming launched kernels from function pointers, after the recording.

cudaLaunchKernel gets the address of the kernel's host stub, a function whose
symbol is the kernel's mangled name, in whatever library holds the kernel.
The recorder snapshots each CUDA-using process's file mappings ("maps"
META); here an address is mapped to (file, offset), the offset to the ELF
virtual address, and that to the enclosing symbol, demangled.  When the file
has no symbol there (stripped), the name is 'libfoo.so+0xVADDR'; when no
snapshot covers the address, the bare pointer.  Registered kernels are named
better: the converter follows launch handle -> host symbol -> the device
name registered for it, a string read back from the mapped file (cstring).

The raw log is the user's (the target may rewrite it), so a maps record can
name any file: in sudo mode the mapped files are opened as the invoking user
(MappedFiles), never through a symbolic link, regular files only, each read
bounded.  A file the user cannot read leaves its names as bare offsets.
"""
from __future__ import annotations

import bisect
import os

from .. import safe_input
from ..demangle import demangle
from .symbols import ElfSymbols

STRING_LIMIT = 4096   # bytes read for one registered kernel name
MAX_MAPPED_FILES = 256  # files one conversion opens at most (a crafted log may name thousands)


class MappedFiles:
    """The files maps records name, each opened once (safe_input.open_inputs:
    as `user`, the invoking user in sudo mode), many per call: one identity
    switch (a fork) per batch, not per file."""

    def __init__(self, user=None):
        self.user = user
        self._fds: dict[str, int | None] = {}
        self._elf: dict[str, ElfSymbols | None] = {}

    def open_many(self, paths) -> None:
        new = [p for p in dict.fromkeys(paths) if p not in self._fds]
        room = max(0, MAX_MAPPED_FILES - len(self._fds))
        for p in new[room:]:
            self._fds[p] = None
        new = new[:room]
        for p, got in zip(new, safe_input.open_inputs(new, self.user) if new else ()):
            self._fds[p] = got if isinstance(got, int) else None

    def fd(self, path: str) -> int | None:
        if path not in self._fds:
            self.open_many([path])
        return self._fds[path]

    def elf(self, path: str) -> ElfSymbols | None:
        if path not in self._elf:
            fd = self.fd(path)
            try:
                self._elf[path] = ElfSymbols(path, fd) if fd is not None else None
            except Exception:  # not ELF, or damaged, or too large: callers fall back to lib+offset
                self._elf[path] = None
        return self._elf[path]

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            if fd is not None:
                os.close(fd)

    def __del__(self):
        self.close()


def _entry(e):
    """(start, end, offset, path) of a maps entry, or None when malformed
    (a path that is not an absolute name could not have come from /proc/PID/maps)."""
    try:
        s, end, off, path = e
        if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
            return None
        return int(s), int(end), int(off), path
    except (TypeError, ValueError):
        return None


class MapsIndex:
    def __init__(self, user=None):
        self.files = MappedFiles(user)
        self.snaps: dict[int, list[tuple[int, list]]] = {}  # pid -> [(ts, sorted entries)]
        self.env: dict[int, dict] = {}
        self._cache: dict[tuple[int, int], str] = {}
        self._strings: dict[tuple[int, int], str | None] = {}

    def add(self, meta: dict) -> None:
        pid = int(meta["pid"])
        entries = sorted(filter(None, map(_entry, meta.get("entries", []))))
        bisect.insort(self.snaps.setdefault(pid, []), (int(meta.get("ts", 0)), entries), key=lambda x: x[0])
        if meta.get("env"):
            self.env[pid] = meta["env"]

    def _mapping(self, pid: int, addr: int, ts: int):
        snaps = self.snaps.get(pid, [])
        # The newest snapshot taken before the call first, then any other.
        i = bisect.bisect_right([t for t, _ in snaps], ts)
        order = list(range(i - 1, -1, -1)) + list(range(i, len(snaps)))
        for k in order:
            entries = snaps[k][1]
            j = bisect.bisect_right(entries, (addr, float("inf"))) - 1
            if j >= 0 and entries[j][0] <= addr < entries[j][1]:
                return entries[j]
        return None

    def symbolize(self, pid: int, addr: int, ts: int) -> str:
        key = (pid, addr)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._symbolize(pid, addr, ts)
        return hit

    def _symbolize(self, pid: int, addr: int, ts: int) -> str:
        m = self._mapping(pid, addr, ts)
        if m is None:
            return f"{addr:#x}"
        start, _, off, path = m
        file_off = addr - start + off
        base = os.path.basename(path)
        elf = self.files.elf(path)
        if elf is None:
            return f"{base}+{file_off:#x}"
        vaddr = elf.offset_to_vaddr(file_off)
        if vaddr is None:
            return f"{base}+{file_off:#x}"
        hit = elf.lookup(vaddr)
        if hit is None:
            return f"{base}+{vaddr:#x}"
        name, delta = hit
        name = demangle(name)
        return name if delta == 0 else f"{name}+{delta:#x}"

    def cstring(self, pid: int, addr: int, ts: int, limit: int = STRING_LIMIT) -> str | None:
        """The NUL-terminated string at `addr` in a file the process mapped
        (a kernel's mangled name in a library's .rodata), read from the file."""
        key = (pid, addr)
        if key in self._strings:
            return self._strings[key]
        m = self._mapping(pid, addr, ts)
        text = None
        fd = self.files.fd(m[3]) if m is not None else None
        if fd is not None:
            start, end, off, _ = m
            try:
                raw = safe_input.read_fd(fd, min(limit, end - addr), addr - start + off)
                if b"\0" in raw:
                    text = raw.split(b"\0", 1)[0].decode("utf-8", "replace") or None
            except (OSError, ValueError, OverflowError):  # a crafted offset: no name
                pass
        self._strings[key] = text
        return text

    def prefetch(self, lookups) -> None:
        """Open, in one batch, the files that these (pid, addr, ts) lookups will read."""
        maps = (self._mapping(pid, addr, ts) for pid, addr, ts in lookups)
        self.files.open_many(m[3] for m in maps if m is not None)

    def close(self) -> None:
        self.files.close()

    def rank(self, pid: int) -> tuple[int | None, int | None]:
        """(RANK, WORLD_SIZE) from the process environment, when set."""
        env = self.env.get(pid) or {}

        def num(k):
            try:
                return int(env[k])
            except (KeyError, ValueError):
                return None
        return num("RANK"), num("WORLD_SIZE")
