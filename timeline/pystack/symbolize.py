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

import bisect
import dataclasses
import struct
import typing

import numpy as np

from .layouts import Layout
from .memory import ProcessMemory

MAX_NAME_CHARS = 1024
MAX_PATH_CHARS = 4096
SPEC_STR = 208             # bytes read past a str's header at once: most names and paths fit
SPEC_TABLE = 480           # ... past a line table's header (half of a torch job's tables fit)
MAX_IDENT_CHARS = 65536  # a file name's end is part of a 3.10/3.11 code object's checksum, up to this long
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

class LineTable(typing.NamedTuple):
    """A code object's byte ranges and their lines (-1: none), as sorted lists
    (bisect on them is the cheapest lookup per frame)."""
    starts: list[int]
    ends: list[int]
    lines: list[int]


def line_at(table: LineTable, offset: int, firstlineno: int) -> int:
    """The line of the instruction at byte `offset` (the first line for a
    frame that has not started, or an offset no range holds)."""
    if offset == NOT_STARTED:
        return firstlineno
    i = bisect.bisect_right(table.ends, offset)
    if i < len(table.ends) and table.starts[i] <= offset and table.lines[i] >= 0:
        return table.lines[i]
    return firstlineno


def ranges_310(table: bytes, firstlineno: int) -> LineTable:
    """The ranges of a 3.10 co_linetable: (bytecode delta, line delta) byte pairs, -128 = no line."""
    out, start, line = LineTable([], [], []), 0, firstlineno
    for i in range(0, len(table) - 1, 2):
        end = start + table[i]
        ldelta = table[i + 1] - 256 if table[i + 1] >= 128 else table[i + 1]
        if ldelta == -128:
            cur = -1
        else:
            line += ldelta
            cur = line
        if end > start:
            out.starts.append(start)
            out.ends.append(end)
            out.lines.append(cur)
        start = end
    return out


def _varint(table: bytes, i: int) -> int:
    b = table[i]
    val, shift = b & 63, 0
    while b & 64 and i + 1 < len(table):
        i += 1
        b = table[i]
        shift += 6
        val |= (b & 63) << shift
    return val


def ranges_311_many(tables: list[bytes], firstlinenos: list[int]) -> list[LineTable]:
    """The ranges of many 3.11+ location tables (PEP 657), decoded together in
    numpy: an entry starts at every byte with bit 7 set, and the sums run per
    table.  One pass for all the code objects a drain names: a torch stack's
    tables hold thousands of entries, and one decode per table (or a loop over
    entries in Python) was most of the recorder's time while a job started."""
    if not tables:
        return []
    whole = b"".join(tables)
    t = np.frombuffer(whole, np.uint8)
    lens = np.fromiter((len(x) for x in tables), np.int64, len(tables))
    seg_end = np.cumsum(lens)
    seg_start = seg_end - lens
    # a table that does not begin with an entry's first byte is damaged: no ranges
    damaged = (lens == 0) | ((t[np.minimum(seg_start, max(t.size - 1, 0))] & 128) == 0 if t.size else True)
    starts = np.flatnonzero(t & 128)
    seg = np.searchsorted(seg_end, starts, "right")  # the table each entry is in
    keep = ~damaged[seg]
    starts, seg = starts[keep], seg[keep]
    first = t[starts].astype(np.int64)
    code = (first >> 3) & 15
    size = 2 * ((first & 7) + 1)
    delta = np.where((code == 11) | (code == 12), code - 10, 0)
    signed = np.flatnonzero((code == 13) | (code == 14))  # a signed varint line delta follows
    if signed.size:
        at = starts[signed] + 1
        ok = at < seg_end[seg[signed]]
        b = np.zeros(signed.size, np.int64)
        b[ok] = t[at[ok]]
        v = b & 63
        for k in np.flatnonzero(ok & (b & 64 != 0)).tolist():  # more than one byte (a jump of 32 lines or more): rare
            v[k] = _varint(whole, int(at[k]))
        delta[signed] = np.where(v & 1, -(v >> 1), v >> 1)
    # per-table running sums: the global sum less its value before each table's first entry
    firsts = np.searchsorted(seg, np.arange(len(tables)))  # index of each table's first entry
    ends, lines = np.cumsum(size), np.cumsum(delta)
    ends -= np.concatenate(([0], ends))[firsts][seg]
    lines += np.asarray(firstlinenos, np.int64)[seg] - np.concatenate(([0], lines))[firsts][seg]
    lines[code == 15] = -1
    starts_b, ends_l, lines_l = (ends - size).tolist(), ends.tolist(), lines.tolist()
    bounds = np.append(firsts, seg.size).tolist()
    return [LineTable(starts_b[i:j], ends_l[i:j], lines_l[i:j]) for i, j in zip(bounds[:-1], bounds[1:])]


def ranges_311(table: bytes, firstlineno: int) -> LineTable:
    """The ranges of one 3.11+ location table."""
    return ranges_311_many([table], [firstlineno])[0]


# -- objects ----------------------------------------------------------------

def decode_tables(minor: int, tables: list[bytes], firstlinenos: list[int]) -> list[LineTable]:
    """Line tables of one format: 3.10's (minor 10), else 3.11's and later."""
    if minor == 10:
        return [ranges_310(t, f) for t, f in zip(tables, firstlinenos)]
    return ranges_311_many(tables, firstlinenos)


@dataclasses.dataclass(eq=False)
class CodeInfo:
    """A code object as read: its line table stays as CPython keeps it (the
    recorder writes it so; conversion decodes it: record raw, convert later)."""
    name: str          # co_qualname (3.11+), else co_name
    filename: str
    firstlineno: int
    table: bytes
    minor: int         # the table's format: 10, or 11 for 3.11 and later
    cid: int | None = None  # the recorder's id of it in the raw log, once written
    _ranges: LineTable | None = None

    def line(self, instr: int) -> int:
        if self._ranges is None:
            self._ranges = decode_tables(self.minor, [self.table], [self.firstlineno])[0]
        return line_at(self._ranges, instr, self.firstlineno)


def str_span(lay: Layout, head: bytes | None, addr: int, limit: int) -> tuple[int, int, int] | None:
    """(data address, byte size, kind: 1, 2 or 4 bytes a character) of a compact
    str object from its header (every name and file name CPython makes)."""
    if head is None:
        return None
    length = struct.unpack_from("<q", head, lay.str_length)[0]
    state = struct.unpack_from("<I", head, lay.str_state)[0]
    kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
    if not compact or kind not in (1, 2, 4) or not 0 <= length <= limit:
        return None
    return addr + (lay.ascii_size if ascii_ else lay.compact_size), length * kind, kind


def bytes_span(lay: Layout, head: bytes | None, addr: int, limit: int) -> tuple[int, int] | None:
    """(data address, size) of a bytes object from its header."""
    if head is None:
        return None
    size = struct.unpack_from("<q", head, lay.bytes_size)[0]
    return (addr + lay.bytes_data, size) if 0 <= size <= limit else None


def _text(data: bytes, kind: int) -> str:
    return data.decode({1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind], "replace")


class CodeReader:
    """Code objects of one process, cached per (address, checksum).  Read in
    batches: all the code objects a drain needs cost two process_vm_readv
    calls in most drains (their headers; then their strings and line tables
    with some bytes past each header, which hold most of them whole), where
    one code object alone took about ten (a syscall each made naming a torch
    job's stacks most of the recorder's time)."""

    def __init__(self, mem: ProcessMemory, lay: Layout, code_type: int = 0, cache: dict | None = None):
        self.mem, self.lay, self.code_type = mem, lay, code_type
        self.cache: dict[tuple[int, int], CodeInfo | None] = dict(cache or {})
        self.mismatches = 0  # checksums that differed: code objects freed and reused since the walk
        self.frame_ids: dict[tuple[int, int, int], int] = {}  # the recorder's: (code, instruction, checksum) -> frame

    def fields(self, code: int) -> dict | None:
        """The fields of the code object at `code` (names read too), and its checksum."""
        return self._read_codes([code])[0]

    def _read_codes(self, codes: list[int]) -> list[dict | None]:
        lay = self.lay
        top = max(lay.co_linetable, lay.co_qualname or 0, lay.co_filename, lay.co_name) + 8
        out: list[dict | None] = []
        wanted: list[tuple[str, int, int]] = []
        for raw in self.mem.read_many([(c, top) for c in codes]):
            if raw is None or (self.code_type and struct.unpack_from("<Q", raw, lay.ob_type)[0] != self.code_type):
                out.append(None)
                continue
            q = lambda off: struct.unpack_from("<Q", raw, off)[0]  # noqa: E731
            f = {"firstlineno": struct.unpack_from("<i", raw, lay.co_firstlineno)[0],
                 "name": q(lay.co_name), "filename": q(lay.co_filename), "linetable": q(lay.co_linetable),
                 "at": len(wanted)}
            f["qualname"] = q(lay.co_qualname) if lay.co_qualname is not None else f["name"]
            wanted += [("str", f["qualname"], MAX_NAME_CHARS), ("str", f["filename"], MAX_IDENT_CHARS),
                       ("bytes", f["linetable"], MAX_LINETABLE)]
            if lay.co_version is not None:
                f["ident"] = struct.unpack_from("<I", raw, lay.co_version)[0]
            else:  # the name's hash and the file name's end, as the BPF walk reads them
                wanted.append(("hash", f["name"], 0))
            out.append(f)
        got = self._read_objects(wanted)
        for f in out:
            if f is None:
                continue
            at = f.pop("at")
            qualname, path, table = got[at:at + 3]
            f["qualname_text"] = None if qualname is None else _text(*qualname)
            f["filename_text"] = None if path is None or len(path[0]) > MAX_PATH_CHARS * path[1] else _text(*path)
            f["table"] = None if table is None else table[0]
            if lay.co_version is None:
                h = got[at + 3]
                f["ident"] = (0xFFFFFFFFFFFFFFFF if h is None else h) ^ (str_tail_mix(path[0]) if path else 0)
            f["check"] = code_check(f["firstlineno"], f["ident"], f["name"], f["filename"])
        return out

    def _read_objects(self, wanted: list[tuple[str, int, int]]) -> list:
        """("str", address, most characters) -> (data, kind); ("bytes", address,
        most bytes) -> (data, 1); ("hash", str address, 0) -> its hash; None
        where unreadable.  The first read takes each header and SPEC_* bytes past
        it; a read that fails there (the object ends a mapping) is made again
        for the header alone, and data longer than the first read comes last."""
        lay, out = self.lay, [None] * len(wanted)
        first = [None if not addr else (addr + lay.str_hash, 8) if kind == "hash"
                 else (addr, lay.ascii_size + SPEC_STR) if kind == "str" else (addr, lay.bytes_data + SPEC_TABLE)
                 for kind, addr, _ in wanted]
        got = self.mem.read_many(first)
        again = [i for i, (span, g) in enumerate(zip(first, got)) if span is not None and g is None
                 and wanted[i][0] != "hash"]
        if again:
            heads = self.mem.read_many([(wanted[i][1], lay.ascii_size if wanted[i][0] == "str" else lay.bytes_data)
                                        for i in again])
            for i, head in zip(again, heads):
                got[i] = head
        rest = []
        for i, ((kind, addr, limit), head) in enumerate(zip(wanted, got)):
            if head is None:
                continue
            if kind == "hash":
                out[i] = struct.unpack("<Q", head)[0]
                continue
            span = str_span(lay, head, addr, limit) if kind == "str" else bytes_span(lay, head, addr, limit)
            if span is None:
                continue
            start, size = span[0] - addr, span[1]
            char = span[2] if kind == "str" else 1
            if start + size <= len(head) or size == 0:
                out[i] = (head[start:start + size], char)
            else:
                rest.append((i, span[:2], char))
        for (i, _, char), data in zip(rest, self.mem.read_many([span for _, span, _ in rest])):
            if data is not None:
                out[i] = (data, char)
        return out

    def resolve(self, code: int, check: int) -> CodeInfo | None:
        key = (code, check)
        if key not in self.cache:
            self.resolve_many([key])
        return self.cache.get(key)

    def resolve_many(self, keys) -> None:
        """Read and cache the code objects of `keys` ((address, checksum)) not cached yet."""
        todo = [k for k in dict.fromkeys(keys) if k not in self.cache]
        done = []
        for key, f in zip(todo, self._read_codes([c for c, _ in todo]) if todo else ()):
            if f is None:
                continue  # unreadable now (not cached: a later stack may read it)
            if f["check"] != key[1]:
                self.mismatches += 1
                self._keep(key, None)  # a reused address is cached as unknown under the old checksum
            elif f["qualname_text"] is not None and f["filename_text"] is not None and f["table"] is not None:
                done.append((key, f))  # all of a code object, or nothing
        minor = 10 if self.lay.minor == 10 else 11
        for key, f in done:
            self._keep(key, CodeInfo(f["qualname_text"], f["filename_text"], f["firstlineno"], f["table"], minor))

    def _keep(self, key: tuple[int, int], info: CodeInfo | None) -> None:
        if len(self.cache) >= MAX_CODES:  # bounded memory: the cache starts over (re-reads cost syscalls only)
            self.cache.clear()
        self.cache[key] = info
