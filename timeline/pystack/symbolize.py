"""Code objects -> function, file and line, read from the live process.

The BPF walker records per frame (code object address, byte offset of the
instruction, identity checksum).  Here the code object is read with
process_vm_readv while the process lives: its qualified name, file name,
first line and line table, and the checksum is computed again from what was
read.  A code object freed and its address reused by another one since the
walk gives another checksum: that frame is left unnamed, never misnamed.

Cached per (code address, checksum) for each process; a forked child's
cache starts as a copy of its parent's (the same memory until it changes,
and the checksum says when it did).

Line tables (decoded here, checked against co_lines() of each version by
tests/system/test_pystack_layouts.py):
  3.10  co_linetable: (bytecode delta, line delta) byte pairs, -128 = no line
  3.11+ the location table of PEP 657 (Objects/locations.md): entries of
        1-8 code units, each with a line delta and columns
"""
from __future__ import annotations

import dataclasses
import struct

import numpy as np

from .layouts import Layout
from .memory import ProcessMemory

MAX_NAME_CHARS = 1024
MAX_PATH_CHARS = 4096
MAX_LINETABLE = 256 << 10  # a 10,000-line module's table is ~40 KiB
MAX_CODES = 50_000         # code objects cached per process; past it the cache starts over
NOT_STARTED = 0xFFFFFFFF  # instruction offset of a frame that has not run yet
M32 = 0xFFFFFFFF


def code_check(firstlineno: int, ident: int, name: int, filename: int) -> int:
    """The checksum pystack.bpf.c computes (code_check there): all 32-bit arithmetic."""
    x = ((firstlineno & M32) * 0x9E3779B1) & M32
    x ^= (ident & M32) ^ ((ident >> 32) & M32)
    x ^= (((name >> 3) & M32) * 0x85EBCA77) & M32
    x ^= (((filename >> 3) & M32) * 0xC2B2AE3D) & M32
    x ^= x >> 15
    return x & M32


def str_tail_mix(data: bytes) -> int:
    """pystack.bpf.c:str_tail of a str whose data (in its own kind) is `data`."""
    tail = data[-16:].ljust(16, b"\0") if len(data) >= 16 else data.ljust(16, b"\0")
    t0, t1 = struct.unpack("<QQ", tail)
    m = (1 << 64) - 1
    x = ((len(data) ^ t0) * 0x9E3779B97F4A7C15) & m
    x = ((x ^ t1) * 0x9E3779B97F4A7C15) & m
    return x ^ (x >> 29)


# -- line tables ------------------------------------------------------------

def ranges_310(table: bytes, firstlineno: int) -> list[tuple[int, int, int]]:
    """(start, end, line) byte ranges of a 3.10 co_linetable; line -1: none."""
    out, start, line = [], 0, firstlineno
    for i in range(0, len(table) - 1, 2):
        end = start + table[i]
        ldelta = table[i + 1] - 256 if table[i + 1] >= 128 else table[i + 1]
        if ldelta == -128:
            cur = -1
        else:
            line += ldelta
            cur = line
        if end > start:
            out.append((start, end, cur))
        start = end
    return out


NUMPY_TABLE = 256  # bytes of location table from which numpy decodes it faster than a loop


def _varint(table: bytes, i: int) -> tuple[int, int]:
    b = table[i]
    val, shift = b & 63, 0
    while b & 64:
        i += 1
        b = table[i]
        shift += 6
        val |= (b & 63) << shift
    return val, i + 1


def _ranges_311_loop(table: bytes, firstlineno: int) -> list[tuple[int, int, int]]:
    out, i, start, line, n = [], 0, 0, firstlineno, len(table)
    while i < n:
        b = table[i]
        if not b & 128:  # not an entry's first byte: the table is damaged here
            break
        code, units = (b >> 3) & 15, (b & 7) + 1
        if code in (13, 14):  # no columns / long form: a signed varint line delta
            v, _ = _varint(table, i + 1)
            line += -(v >> 1) if v & 1 else v >> 1
        elif code in (11, 12):  # one-line forms 1 and 2
            line += code - 10
        end = start + 2 * units
        out.append((start, end, -1 if code == 15 else line))
        start = end
        i += 1
        while i < n and not table[i] & 128:
            i += 1
    return out


def ranges_311(table: bytes, firstlineno: int) -> list[tuple[int, int, int]]:
    """(start, end, line) byte ranges of a 3.11+ location table; line -1: none.
    In numpy: an entry starts at every byte with bit 7 set (a torch function's
    table has thousands; a loop over them in Python was most of the recorder's
    time while a training job started)."""
    if len(table) < NUMPY_TABLE:
        return _ranges_311_loop(table, firstlineno)
    t = np.frombuffer(table, np.uint8)
    if not t.size or not t[0] & 128:  # not an entry's first byte: the table is damaged here
        return []
    starts = np.flatnonzero(t & 128)
    first = t[starts].astype(np.int64)
    code = (first >> 3) & 15
    ends = np.cumsum(2 * ((first & 7) + 1))
    delta = np.where((code == 11) | (code == 12), code - 10, 0)
    signed = np.flatnonzero((code == 13) | (code == 14))  # a signed varint line delta follows
    if signed.size:
        at = starts[signed] + 1
        v = np.zeros(signed.size, np.int64)
        ok = at < t.size
        b = np.zeros(signed.size, np.int64)
        b[ok] = t[at[ok]]
        v[ok] = b[ok] & 63
        long = np.flatnonzero(ok & (b & 64 != 0))
        for k in long.tolist():  # more than one byte (a jump of 32 lines or more): rare
            v[k] = _varint(table, int(at[k]))[0]
        delta[signed] = np.where(v & 1, -(v >> 1), v >> 1)
    lines = firstlineno + np.cumsum(delta)
    lines[code == 15] = -1
    return list(zip((ends - 2 * ((first & 7) + 1)).tolist(), ends.tolist(), lines.tolist()))


def line_at(ranges: list[tuple[int, int, int]], offset: int, firstlineno: int) -> int:
    """The line of the instruction at byte `offset` (the first line for a
    frame that has not started, or an offset no range holds)."""
    if offset == NOT_STARTED:
        return firstlineno
    lo, hi = 0, len(ranges)
    while lo < hi:
        mid = (lo + hi) // 2
        if ranges[mid][1] <= offset:
            lo = mid + 1
        else:
            hi = mid
    if lo < len(ranges) and ranges[lo][0] <= offset < ranges[lo][1] and ranges[lo][2] >= 0:
        return ranges[lo][2]
    return firstlineno


# -- objects ----------------------------------------------------------------

@dataclasses.dataclass
class CodeInfo:
    name: str          # co_qualname (3.11+), else co_name
    filename: str
    firstlineno: int
    ranges: list

    def line(self, instr: int) -> int:
        return line_at(self.ranges, instr, self.firstlineno)


def read_str_data(mem: ProcessMemory, lay: Layout, addr: int, limit: int) -> tuple[bytes, int] | None:
    """A compact str object's data bytes and kind (1, 2 or 4 bytes a character)."""
    head = mem.read(addr, lay.ascii_size) if addr else None
    if head is None:
        return None
    length = struct.unpack_from("<q", head, lay.str_length)[0]
    state = struct.unpack_from("<I", head, lay.str_state)[0]
    kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
    if not compact or kind not in (1, 2, 4) or not 0 <= length <= limit:
        return None
    if length == 0:
        return b"", kind
    data = mem.read(addr + (lay.ascii_size if ascii_ else lay.compact_size), length * kind)
    return None if data is None else (data, kind)


def read_str(mem: ProcessMemory, lay: Layout, addr: int, limit: int) -> str | None:
    """A str object's text (compact strings: every name and file name CPython makes)."""
    got = read_str_data(mem, lay, addr, limit)
    if got is None:
        return None
    data, kind = got
    return data.decode({1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind], "replace")


def read_bytes(mem: ProcessMemory, lay: Layout, addr: int, limit: int) -> bytes | None:
    head = mem.read(addr, lay.bytes_data) if addr else None
    if head is None:
        return None
    size = struct.unpack_from("<q", head, lay.bytes_size)[0]
    if not 0 <= size <= limit:
        return None
    return mem.read(addr + lay.bytes_data, size) if size else b""


class CodeReader:
    """Code objects of one process, cached per (address, checksum)."""

    def __init__(self, mem: ProcessMemory, lay: Layout, code_type: int = 0, cache: dict | None = None):
        self.mem, self.lay, self.code_type = mem, lay, code_type
        self.cache: dict[tuple[int, int], CodeInfo | None] = dict(cache or {})
        self.mismatches = 0  # checksums that differed: code objects freed and reused since the walk

    def fields(self, code: int) -> dict | None:
        """The identity fields of the code object at `code`, and its checksum."""
        lay = self.lay
        top = max(lay.co_linetable, lay.co_qualname or 0, lay.co_filename, lay.co_name) + 8
        raw = self.mem.read(code, top)
        if raw is None:
            return None
        if self.code_type and struct.unpack_from("<Q", raw, lay.ob_type)[0] != self.code_type:
            return None
        q = lambda off: struct.unpack_from("<Q", raw, off)[0]  # noqa: E731
        first = struct.unpack_from("<i", raw, lay.co_firstlineno)[0]
        name, filename = q(lay.co_name), q(lay.co_filename)
        if lay.co_version is not None:
            ident = struct.unpack_from("<I", raw, lay.co_version)[0]
        else:  # the name's hash and the file name's end, as the BPF walk reads them
            h = self.mem.u64(name + lay.str_hash) if name else None
            ident = 0xFFFFFFFFFFFFFFFF if h is None else h
            got = read_str_data(self.mem, lay, filename, 65536) if filename else None
            ident ^= str_tail_mix(got[0]) if got is not None else 0
        return {"firstlineno": first, "name": name, "filename": filename,
                "qualname": q(lay.co_qualname) if lay.co_qualname is not None else name,
                "linetable": q(lay.co_linetable),
                "check": code_check(first, ident, name, filename)}

    def resolve(self, code: int, check: int) -> CodeInfo | None:
        key = (code, check)
        if key in self.cache:
            return self.cache[key]
        info = None
        f = self.fields(code)
        if f is not None and f["check"] != check:
            self.mismatches += 1
        elif f is not None:
            name = read_str(self.mem, self.lay, f["qualname"], MAX_NAME_CHARS)
            filename = read_str(self.mem, self.lay, f["filename"], MAX_PATH_CHARS)
            table = read_bytes(self.mem, self.lay, f["linetable"], MAX_LINETABLE)
            if name is not None and filename is not None and table is not None:  # all of it, or nothing
                decode = ranges_310 if self.lay.minor == 10 else ranges_311
                info = CodeInfo(name, filename, f["firstlineno"], decode(table, f["firstlineno"]))
        if info is not None or (f is not None and f["check"] != check):
            if len(self.cache) >= MAX_CODES:  # bounded memory: the cache starts over (re-reads cost syscalls only)
                self.cache.clear()
            self.cache[key] = info  # a reused address is cached as unknown under the old checksum
        return info
