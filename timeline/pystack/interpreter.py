"""Is this process a CPython we can walk, and where is its runtime?

From /proc/PID/maps, the mapped file that holds the interpreter: a
libpython3.X.so (pyenv, conda, uv, system builds with --enable-shared) or
the python executable itself (Debian's /usr/bin/python3.11, static builds).
Its ELF dynamic symbols give `_PyRuntime` (all the state a walk starts
from), `PyCode_Type` (to check that a pointer is a code object) and
`Py_Version` (3.11+; older versions are told by the file name); the load
bias comes from the file's mappings.  3.13+ processes carry their own
offsets (_Py_DebugOffsets at the start of _PyRuntime).

Both the maps file and the ELF file are opened through timeline.safe_input
as the invoking user (sudo mode) and read with a bound; what is learnt from
an ELF file is cached per (device, inode), so forked workers and other
processes of the same interpreter cost nothing more.
"""
from __future__ import annotations

import dataclasses
import os
import re
import struct

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
import numpy as np

from .. import safe_input
from . import layouts
from .memory import ProcessMemory

TP_DEALLOC = 48           # PyTypeObject.tp_dealloc: after ob_refcnt, ob_type, ob_size, tp_name, tp_basicsize,
                          # tp_itemsize (a stable ABI layout in every version)
MAPS_LIMIT = 8 << 20      # bytes of /proc/PID/maps read (a torch process: ~200 KB)
ELF_BUDGET = 64 << 20     # bytes pyelftools may read from one interpreter file
# File names that may hold an interpreter: libpython3.11.so.1.0, python3.11, python3, python
_NAME = re.compile(r"^(lib)?python(\d)?(\.(\d+))?")
_VERSION_IN_NAME = re.compile(r"python(\d)\.(\d+)")


@dataclasses.dataclass
class Mapping:
    start: int
    end: int
    offset: int
    dev: str
    inode: int
    path: str


@dataclasses.dataclass(frozen=True)
class ElfInfo:
    """What an interpreter file says about itself (cached per device and inode)."""
    runtime: int | None       # st_value of _PyRuntime
    code_type: int | None     # st_value of PyCode_Type
    py_version: int | None    # st_value of Py_Version (3.11+)
    shared: bool              # ET_DYN: addresses are relative to the load bias
    first_vaddr: int          # p_vaddr of the PT_LOAD at file offset 0
    exec_segments: tuple = ()  # (p_vaddr, p_offset, p_filesz) of executable PT_LOADs


@dataclasses.dataclass
class Interpreter:
    """A walkable CPython process."""
    pid: int
    path: str
    version: tuple[int, int, int]
    layout: layouts.Layout
    runtime: int
    code_type: int
    code_free: int | None = None       # file offset of code_dealloc in `path`
    file_key: tuple[str, int] = ("", 0)  # (maps device, inode) of `path`


class NotPython(Exception):
    """No interpreter in this process (nothing to say)."""


class Unsupported(Exception):
    """A CPython we cannot walk: the message says why, in one line."""


def parse_maps(text: str) -> list[Mapping]:
    out = []
    for line in text.split("\n"):
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        start, _, end = parts[0].partition("-")
        try:
            out.append(Mapping(int(start, 16), int(end, 16), int(parts[2], 16), parts[3], int(parts[4]), parts[5]))
        except ValueError:
            continue
    return out


def read_maps(pid: int, user=None) -> list[Mapping] | None:
    try:
        raw = safe_input.read_file(f"/proc/{pid}/maps", user, limit=MAPS_LIMIT, whole=False)
    except OSError:
        return None
    return parse_maps(raw.decode("utf-8", "surrogateescape"))


def candidates(maps: list[Mapping]) -> list[Mapping]:
    """One mapping per interpreter-looking file, libpython first."""
    seen, out = set(), []
    for m in maps:
        if (m.dev, m.inode) in seen or not _NAME.match(os.path.basename(m.path)):
            continue
        seen.add((m.dev, m.inode))
        out.append(m)
    out.sort(key=lambda m: not os.path.basename(m.path).startswith("lib"))
    return out


_SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                 ("size", "<u8")])


def _symbols(elf: ELFFile, names: tuple[str, ...], table: str = ".dynsym") -> dict[str, int]:
    """st_value of defined symbols by name, from .dynsym (what libpython and a
    python executable built with --export-dynamic export) or .symtab.  Searched
    with numpy (pyelftools' by-name lookup builds a dict of every symbol: 0.4 s
    for a libpython's full .symtab)."""
    sec = elf.get_section_by_name(table)
    if sec is None or sec["sh_type"] == "SHT_NOBITS":
        return {}
    syms = np.frombuffer(sec.data(), _SYM)
    strtab = elf.get_section(sec["sh_link"]).data()
    found: dict[str, int] = {}
    defined = syms[syms["shndx"] != 0]
    for name in names:
        # every place the name's bytes end a string: linkers share tails ("foo_bar" holds "bar")
        want, starts, at = name.encode() + b"\0", [], strtab.find(name.encode() + b"\0")
        while at >= 0:
            starts.append(at)
            at = strtab.find(want, at + 1)
        hit = defined[np.isin(defined["name"], starts)]
        if hit.size:
            found[name] = int(hit["value"][0])
    return found


def elf_info(fd: int, name: str) -> ElfInfo:
    """What the ELF file open on fd (closed here) says.  Raises OSError,
    ELFError or ValueError for a file that is not a usable ELF file."""
    with safe_input.BoundedReader(fd, ELF_BUDGET, name) as f:
        elf = ELFFile(f)
        if elf.elfclass != 64 or not elf.little_endian or elf["e_machine"] != "EM_X86_64":
            raise ValueError("not an x86-64 ELF file")
        first = min((s["p_vaddr"] - s["p_offset"] for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"),
                    default=0)
        syms = _symbols(elf, ("_PyRuntime", "PyCode_Type", "Py_Version"))
        execs = tuple((s["p_vaddr"], s["p_offset"], s["p_filesz"]) for s in elf.iter_segments()
                      if s["p_type"] == "PT_LOAD" and s["p_flags"] & 1)  # PF_X
        return ElfInfo(syms.get("_PyRuntime"), syms.get("PyCode_Type"), syms.get("Py_Version"),
                       elf["e_type"] == "ET_DYN", first, execs)


class Finder:
    """Finds the interpreter of processes; ELF facts cached per file."""

    def __init__(self, user=None):
        self.user = user
        self.elf: dict[tuple[str, int], ElfInfo | None] = {}

    def _info(self, pid: int, m: Mapping) -> ElfInfo | None:
        key = (m.dev, m.inode)
        if key not in self.elf:
            info = None
            for path in (m.path, f"/proc/{pid}/root{m.path}"):  # the latter: another mount namespace
                try:
                    fd = safe_input.open_input(path, self.user)
                except OSError:
                    continue
                if os.fstat(fd).st_ino != m.inode:  # not the mapped file (replaced, or another namespace)
                    os.close(fd)
                    continue
                try:
                    info = elf_info(fd, path)
                except (OSError, ELFError, ValueError, KeyError, IndexError, struct.error):
                    pass
                break
            self.elf[key] = info
        return self.elf[key]

    def find(self, pid: int, maps: list[Mapping]) -> Interpreter:
        """Raises NotPython or Unsupported."""
        for m in candidates(maps):
            info = self._info(pid, m)
            if info is None or info.runtime is None:
                continue
            bias = 0
            if info.shared:
                base = min((x.start - x.offset for x in maps if (x.dev, x.inode) == (m.dev, m.inode)), default=None)
                if base is None:
                    continue
                bias = base - info.first_vaddr
            return self._interpreter(pid, m, info, bias)
        raise NotPython()

    def _interpreter(self, pid: int, m: Mapping, info: ElfInfo, bias: int) -> Interpreter:
        mem = ProcessMemory(pid)
        runtime = bias + info.runtime
        version = None
        if info.py_version is not None:
            raw = mem.read(bias + info.py_version, 4)
            if raw is not None:
                hexv = struct.unpack("<I", raw)[0]
                version = (hexv >> 24, (hexv >> 16) & 0xFF, (hexv >> 8) & 0xFF)
        if version is None:
            named = _VERSION_IN_NAME.search(os.path.basename(m.path))
            if not named:
                raise Unsupported(f"{m.path}: cannot tell which Python version it is")
            version = (int(named.group(1)), int(named.group(2)), 0)
        major, minor = version[:2]
        try:
            lay = layouts.for_version(major, minor)
            if minor >= 13:
                raw = mem.read(runtime, layouts.DEBUG_OFFSETS_SIZE)
                if raw is None:
                    raise layouts.LayoutError("cannot read _PyRuntime")
                lay = layouts.from_debug_offsets(raw, minor)
        except layouts.LayoutError as e:
            raise Unsupported(f"{m.path}: {e}") from None
        code_type = bias + info.code_type if info.code_type else 0
        return Interpreter(pid, m.path, version, lay, runtime, code_type,
                           self._code_free(mem, code_type, bias, info), (m.dev, m.inode))

    @staticmethod
    def _code_free(mem: ProcessMemory, code_type: int, bias: int, info: ElfInfo) -> int | None:
        """File offset of the function that frees code objects (code_dealloc, static in
        every build): PyCode_Type.tp_dealloc, read from the process, so stripped builds
        have it too."""
        fn = mem.u64(code_type + TP_DEALLOC) if code_type else None
        if not fn:
            return None
        vaddr = fn - bias
        return next((vaddr - va + off for va, off, size in info.exec_segments if va <= vaddr < va + size), None)
