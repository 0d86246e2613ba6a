"""ELF symbols of shared libraries: exported entry points and address lookup.

pyelftools parses the headers; the symbol tables themselves are read as
numpy arrays (Elf64_Sym), so a library with a million symbols (libtorch_cuda)
is searched without a Python loop per symbol.

Demangling is timeline.demangle (libstdc++'s __cxa_demangle over ctypes).
"""
from __future__ import annotations

import errno
import os
import stat

import numpy as np
from elftools.elf.elffile import ELFFile

from .. import safe_input

SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                ("value", "<u8"), ("size", "<u8")])
STT_FUNC, STT_GNU_IFUNC = 2, 10
VERSYM_HIDDEN = 0x8000
# Bytes read from one ELF file at most: headers plus the symbol, string and
# version tables (92 MiB for torch 2.x libtorch_cpu.so: room for libraries several times larger).
ELF_READ_BUDGET = 512 << 20


def _open_following(path: str) -> int:
    """safe_input's flags less O_NOFOLLOW, and the same regular-file check."""
    fd = os.open(path, safe_input.READ_FLAGS & ~os.O_NOFOLLOW)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise safe_input.NotRegularFile(errno.EINVAL, "not a regular file", path)
    os.set_blocking(fd, True)
    return fd


class ElfSymbols:
    """Symbols and load segments of one ELF file (64-bit little-endian).

    ElfSymbols(path, fd) reads a descriptor opened by the caller and leaves
    it open (a file a raw log names, opened as the invoking user by
    safe_input).  ElfSymbols(path) opens `path` itself, following symbolic
    links as before (the recorder's library scan names libraries by ldconfig
    and --cuda-lib paths, often links, and by /proc/PID/root paths), but
    without blocking and regular files only.  Either way at most
    ELF_READ_BUDGET bytes are read: a crafted file cannot make us read
    without end."""

    def __init__(self, path: str, fd: int | None = None):
        self.path = os.fspath(path)
        own = fd is None
        if own:
            fd = _open_following(self.path)
        try:
            with safe_input.BoundedReader(fd, ELF_READ_BUDGET, self.path, closefd=False) as f:
                self._parse(f)
        finally:
            if own:
                os.close(fd)

    def _parse(self, f) -> None:
        elf = ELFFile(f)
        if elf.elfclass != 64 or not elf.little_endian:
            raise ValueError(f"{self.path}: not a 64-bit little-endian ELF")
        self.segments = [(s["p_offset"], s["p_vaddr"], s["p_filesz"], s["p_memsz"])
                         for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        self.tables = []  # (syms, strtab bytes, versym or None); .dynsym first when present
        self.has_dynsym = False
        for sym_sec, has_ver in ((".dynsym", True), (".symtab", False)):
            sec = elf.get_section_by_name(sym_sec)
            if sec is None or sec["sh_type"] == "SHT_NOBITS":
                continue
            syms = np.frombuffer(sec.data(), SYM)
            strtab = elf.get_section(sec["sh_link"]).data()
            ver = None
            if has_ver:
                vs = elf.get_section_by_name(".gnu.version")
                if vs is not None:
                    ver = np.frombuffer(vs.data(), "<u2")
                    if ver.size != syms.size:
                        ver = None
            self.tables.append((syms, strtab, ver))
            self.has_dynsym |= has_ver
        self._funcs = None

    @staticmethod
    def _name(strtab: bytes, off: int) -> str:
        end = strtab.find(b"\0", off)
        return strtab[off:end if end >= 0 else None].decode("utf-8", "replace")

    def vaddr_to_offset(self, vaddr: int) -> int | None:
        for off, va, filesz, _ in self.segments:
            if va <= vaddr < va + filesz:
                return vaddr - va + off
        return None

    def offset_to_vaddr(self, off: int) -> int | None:
        for foff, va, filesz, _ in self.segments:
            if foff <= off < foff + filesz:
                return off - foff + va
        return None

    def exports(self, names) -> dict[str, int]:
        """name -> file offset (what uprobes attach to) of defined functions.

        With several versions of a name, the default (non-hidden) one wins.
        """
        want = set(names)
        out: dict[str, int] = {}
        if not self.has_dynsym:
            return out
        syms, strtab, ver = self.tables[0]
        typ = syms["info"] & 0xF
        ok = ((typ == STT_FUNC) | (typ == STT_GNU_IFUNC)) & (syms["shndx"] != 0) & (syms["value"] != 0)
        hidden = (ver & VERSYM_HIDDEN) != 0 if ver is not None else np.zeros(syms.size, bool)
        for i in np.nonzero(ok)[0]:
            name = self._name(strtab, int(syms["name"][i]))
            if name not in want or (name in out and hidden[i]):
                continue
            off = self.vaddr_to_offset(int(syms["value"][i]))
            if off is not None:
                out[name] = off
        return out

    def _func_index(self):
        if self._funcs is None:
            starts, sizes, names, tabs = [], [], [], []
            for t, (syms, _, _) in enumerate(self.tables):
                typ = syms["info"] & 0xF
                ok = ((typ == STT_FUNC) | (typ == STT_GNU_IFUNC)) & (syms["shndx"] != 0) & (syms["value"] != 0)
                sel = syms[ok]
                starts.append(sel["value"])
                sizes.append(sel["size"])
                names.append(sel["name"])
                tabs.append(np.full(sel.size, t, np.uint8))
            if starts:
                start = np.concatenate(starts)
                order = np.argsort(start, kind="stable")
                self._funcs = (start[order], np.concatenate(sizes)[order], np.concatenate(names)[order],
                               np.concatenate(tabs)[order])
            else:
                e = np.zeros(0, np.uint64)
                self._funcs = (e, e, np.zeros(0, np.uint32), np.zeros(0, np.uint8))
        return self._funcs

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """(symbol, offset into it) of the function containing vaddr."""
        start, size, name, tab = self._func_index()
        i = int(np.searchsorted(start, np.uint64(vaddr), side="right")) - 1
        # Several symbols may share a start (aliases): any covering one will do.
        while i >= 0 and int(start[i]) <= vaddr:
            s, n = int(start[i]), int(size[i])
            if vaddr < s + max(n, 1):
                return self._name(self.tables[int(tab[i])][1], int(name[i])), vaddr - s
            if i == 0 or int(start[i - 1]) != s:
                break
            i -= 1
        return None
