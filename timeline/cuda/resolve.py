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
"""
from __future__ import annotations

import bisect
import os

from .symbols import demangle, elf_symbols


class MapsIndex:
    def __init__(self):
        self.snaps: dict[int, list[tuple[int, list]]] = {}  # pid -> [(ts, sorted entries)]
        self.env: dict[int, dict] = {}
        self._cache: dict[tuple[int, int], str] = {}
        self._strings: dict[tuple[int, int], str | None] = {}

    def add(self, meta: dict) -> None:
        pid = int(meta["pid"])
        entries = sorted((int(s), int(e), int(o), p) for s, e, o, p in meta.get("entries", []))
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
        elf = elf_symbols(path)
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

    def cstring(self, pid: int, addr: int, ts: int, limit: int = 4096) -> str | None:
        """The NUL-terminated string at `addr` in a file the process mapped
        (a kernel's mangled name in a library's .rodata), read from the file."""
        key = (pid, addr)
        if key in self._strings:
            return self._strings[key]
        m = self._mapping(pid, addr, ts)
        text = None
        if m is not None:
            start, end, off, path = m
            try:
                with open(path, "rb") as f:
                    f.seek(addr - start + off)
                    raw = f.read(min(limit, end - addr))
                if b"\0" in raw:
                    text = raw.split(b"\0", 1)[0].decode("utf-8", "replace") or None
            except OSError:
                pass
        self._strings[key] = text
        return text

    def rank(self, pid: int) -> tuple[int | None, int | None]:
        """(RANK, WORLD_SIZE) from the process environment, when set."""
        env = self.env.get(pid) or {}

        def num(k):
            try:
                return int(env[k])
            except (KeyError, ValueError):
                return None
        return num("RANK"), num("WORLD_SIZE")
