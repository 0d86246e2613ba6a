"""Trace files and raw logs named on the command line: the one place that
opens them, tells what they are, and walks their bytes.

Every command that reads a trace (check, query, merge, view, check
--annotate) opens it with open_trace_file: as the invoking user in sudo mode,
never through a symbolic link, regular files only, a FIFO refused at once
(safe_input), each problem one line (TraceFileError).  Then:

  sniff(head)        raw log / gzip / Chrome JSON / Perfetto protobuf, from the first bytes
  format_for(name)   the output format a file name implies (case-insensitive)
  inflate(fd)        gzip in bounded pieces, with a cap on the decompressed total
  iter_fields(buf)   the protobuf wire format, walked without parsing messages
  file_fields(fd)    the same for a whole file's top-level fields, a chunk at a time
  packet_spans(buf)  the TracePackets of a Perfetto trace, as byte ranges
"""
from __future__ import annotations

import errno
import os
import zlib

from . import safe_input
from .errors import UserError
from .rawlog import MAGIC
from .safe_output import switches_identity
from .terminal import printable

RAW, GZIP, JSON, PROTO = "raw", "gzip", "json", "proto"
CHROME_SUFFIXES = (".json", ".json.gz")
PERFETTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")
HEAD_BYTES = 4096           # enough to tell a file's kind
MAX_TRACE_BYTES = 4 << 30   # the most of one trace held in memory or decompressed (the wasm engine's ceiling too)
MAX_TRACE_ENV = "TIMELINE_MAX_TRACE_BYTES"  # a smaller (or larger) cap, in bytes
_FEED = 1 << 16             # compressed bytes per read: small, as zlib copies what it has not used yet
_PIECE = 1 << 20            # decompressed bytes per piece


class TraceFileError(UserError):
    """A trace or raw log that cannot be used as given (one line)."""


# -- names -------------------------------------------------------------------

def format_for(name) -> str:
    """The format an output name implies: .json / .json.gz (any case) -> chrome, else perfetto."""
    return "chrome" if os.fspath(name).lower().endswith(CHROME_SUFFIXES) else "perfetto"


def is_gzip_name(name) -> bool:
    return os.fspath(name).lower().endswith(".gz")


# -- opening -----------------------------------------------------------------

def open_trace_file(path, user=None) -> int:
    """A descriptor on `path` opened with safe_input.open_input (as `user`, an
    identity.InvokingUser; None: as we are); TraceFileError, one line, when that fails."""
    p = printable(path)
    try:
        return safe_input.open_input(path, user)
    except safe_input.NotRegularFile as e:
        if e.errno == errno.ELOOP:
            try:  # as root, resolving the whole chain could name what the user cannot see
                target = os.readlink(path) if switches_identity(user) else os.path.realpath(path)
            except OSError:
                target = "?"
            raise TraceFileError(f"{p} is a symbolic link; pass the file itself ({printable(target)})") from None
        raise TraceFileError(f"{p} is not a regular file") from None
    except OSError as e:
        raise TraceFileError(f"cannot read {p}: {e.strerror or e}") from None


# -- what a file is ------------------------------------------------------------

def sniff(head: bytes) -> str | None:
    """RAW, GZIP, JSON or PROTO from a file's first bytes (HEAD_BYTES of them
    for JSON and PROTO to be told apart from noise), else None."""
    if head.startswith(MAGIC[:5]):
        return RAW
    if head[:2] == b"\x1f\x8b":
        return GZIP
    if _json_start(head):
        return JSON
    if _packets_start(head):
        return PROTO
    return None


def gzip_head(head: bytes, n: int = 256) -> bytes:
    """The first decompressed bytes of gzip data (b"" when they are not gzip)."""
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, n)
    except zlib.error:
        return b""


def read_head(fd: int) -> bytes:
    return os.pread(fd, HEAD_BYTES, 0)


def _json_start(head: bytes) -> bool:
    text = head.lstrip()
    return text[:1] in (b"{", b"[") and (len(text) < 2 or text[1:].lstrip()[:1] in b'"{[]}')


def _packets_start(head: bytes) -> bool:
    """A Perfetto trace is `repeated TracePacket packet = 1`: tag 0x0a, a
    length, then the packet's fields.  The fields the head holds must be
    well-formed and stay inside the packet; being cut off by the end of the
    head is fine."""
    if head[:1] != b"\x0a":
        return False
    try:
        length, i = varint(head, 1, len(head))
    except ProtoError:
        return False
    stop = i + length
    try:
        for _ in iter_fields(head, i, min(stop, len(head))):
            pass
    except ProtoCut:
        return stop > len(head)  # cut by the head's end, not overrunning the packet
    except ProtoError:
        return False
    return True


def check_loadable(fd: int, path) -> None:
    """TraceFileError for what trace_processor would misread: an empty file,
    a raw log, a corrupt, cut or oversized gzip (trace_processor would load
    half the events and report missing tables)."""
    if refuse_empty_or_raw(read_head(fd), path) == GZIP:
        for _ in inflate(fd, path):
            pass


def refuse_empty_or_raw(head: bytes, path) -> str | None:
    """sniff(head), or TraceFileError when the file is empty or a raw log."""
    p = printable(path)
    if not head:
        raise TraceFileError(f"{p} is empty")
    kind = sniff(head)
    if kind == RAW:
        raise TraceFileError(f"{p} is a raw log: convert it first with `timeline convert {p}`")
    return kind


def open_loadable(path, user) -> int:
    """A descriptor on `path`, opened as `user` (open_trace_file) and checked
    with check_loadable; the caller closes it."""
    fd = open_trace_file(path, user)
    try:
        check_loadable(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def viewable_kind(head: bytes, path) -> str:
    """JSON, PROTO or GZIP (holding one of those), else TraceFileError: what the UI opens."""
    p = printable(path)
    kind = refuse_empty_or_raw(head, path)
    if kind == GZIP:
        if sniff(gzip_head(head)) in (JSON, PROTO):
            return GZIP
        raise TraceFileError(f"{p} is gzip'd but not a Chrome JSON or Perfetto trace")
    if kind is None:
        raise TraceFileError(f"{p} is not a Perfetto (protobuf) or Chrome JSON trace")
    return kind


# -- gzip ----------------------------------------------------------------------

def max_trace_bytes() -> int:
    """MAX_TRACE_BYTES, or the positive number of bytes in $TIMELINE_MAX_TRACE_BYTES."""
    v = os.environ.get(MAX_TRACE_ENV, "")
    return int(v) if v.isascii() and v.isdigit() and int(v) > 0 else MAX_TRACE_BYTES


def inflate(fd: int, path, limit: int | None = None):
    """The decompressed bytes of gzip file `fd`, in pieces of at most 1 MiB
    (concatenated members are read in turn; zero padding after the last is
    ignored).  TraceFileError when the data is corrupt, cut off, or more than
    `limit` bytes (max_trace_bytes()): memory stays small whatever the file holds."""
    p = printable(path)
    limit = max_trace_bytes() if limit is None else limit
    d, fed, total, off = zlib.decompressobj(wbits=31), False, 0, 0
    try:
        while chunk := os.pread(fd, _FEED, off):
            off += len(chunk)
            while chunk:
                if not fed and not chunk.strip(b"\0"):
                    return  # zero padding after the last member
                fed = True
                out = d.decompress(chunk, _PIECE)
                chunk = d.unconsumed_tail
                while True:
                    total += len(out)
                    if total > limit:
                        raise TraceFileError(f"{p} decompresses to more than {_size(limit)}: "
                                             f"timeline reads at most that much of one trace")
                    if out:
                        yield out
                    # all input taken but output may still be pending in the decompressor
                    if d.eof or chunk or len(out) < _PIECE:
                        break
                    out = d.decompress(b"", _PIECE)
                if d.eof:  # another member may follow (concatenated gzip)
                    chunk, d, fed = d.unused_data + chunk, zlib.decompressobj(wbits=31), False
    except zlib.error as e:
        raise TraceFileError(f"{p} is a corrupt gzip file ({e})") from None
    if fed:
        raise TraceFileError(f"{p} is a truncated gzip file (cut off before its end)")


def read_whole(fd: int, path, limit: int | None = None) -> bytes | bytearray:
    """The whole trace in memory, decompressed when it is gzip; TraceFileError
    past `limit` bytes (max_trace_bytes()).  A gzip file is decompressed twice
    (counting, then filling a buffer of that size): a gzip bomb costs time,
    never memory."""
    limit = max_trace_bytes() if limit is None else limit
    if os.pread(fd, 2, 0) == b"\x1f\x8b":
        size = sum(len(piece) for piece in inflate(fd, path, limit))
        buf, at = bytearray(size), 0
        for piece in inflate(fd, path, size):
            buf[at:at + len(piece)] = piece
            at += len(piece)
        if at != size:  # the file changed between the passes
            raise TraceFileError(f"{printable(path)} changed while it was read")
        return buf
    too_large = TraceFileError(f"{printable(path)} is larger than {_size(limit)}: "
                               f"timeline reads at most that much of one trace")
    if os.fstat(fd).st_size > limit:
        raise too_large
    data = safe_input.read_fd(fd, limit + 1)
    if len(data) > limit:  # it grew since fstat
        raise too_large
    return data


def _size(n: int) -> str:
    return f"{n / (1 << 30):g} GiB" if n >= 1 << 30 else f"{n / (1 << 20):g} MiB"


# -- protobuf wire format --------------------------------------------------------

class ProtoError(ValueError):
    """Not the protobuf wire format.  offset: where the field that is not
    starts (file_fields; None elsewhere)."""

    def __init__(self, message: str, offset: int | None = None):
        super().__init__(message)
        self.offset = offset


class ProtoCut(ProtoError):
    """The data ends inside a field (cut off, or a length past the end).
    length: the whole field's length, when its key and length were whole (file_fields)."""

    def __init__(self, message: str, offset: int | None = None, length: int | None = None):
        super().__init__(message, offset)
        self.length = length


WIRE_VARINT, WIRE_FIXED64, WIRE_LEN, WIRE_FIXED32 = 0, 1, 2, 5
_WALK_CHUNK = 4 << 20  # file_fields: bytes read at a time


def varint(buf, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the varint at `pos` (at most 10 bytes)."""
    value = shift = 0
    while True:
        if pos >= end:
            raise ProtoCut("cut off inside a varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ProtoError("varint longer than 10 bytes")


def _field(buf, pos: int, end: int):
    """(field number, wire type, value, start, stop) of the field at `pos`
    (see iter_fields); its payload may run past `end`, which the caller
    checks.  ProtoCut when its key or length is cut off by `end`."""
    key, pos = varint(buf, pos, end)
    number, wire = key >> 3, key & 7
    if not number:
        raise ProtoError("field number 0")
    if wire == WIRE_VARINT:
        start = pos
        value, pos = varint(buf, pos, end)
        return number, wire, value, start, pos
    if wire == WIRE_LEN:
        n, pos = varint(buf, pos, end)
    elif wire == WIRE_FIXED64:
        n = 8
    elif wire == WIRE_FIXED32:
        n = 4
    else:
        raise ProtoError(f"wire type {wire}")
    return number, wire, None, pos, pos + n


def iter_fields(buf, pos: int = 0, end: int | None = None):
    """(field number, wire type, value, start, stop) of each field of the
    message in buf[pos:end]: value is the integer of a varint (else None),
    buf[start:stop] the field's payload.  ProtoError where the bytes stop
    being protobuf (ProtoCut: a field runs past `end`)."""
    end = len(buf) if end is None else end
    while pos < end:
        field = _field(buf, pos, end)
        if field[4] > end:
            raise ProtoCut("a field runs past the end")
        yield field
        pos = field[4]


def file_fields(fd: int, chunk: int = _WALK_CHUNK):
    """(field number, wire type, start, stop) of each top-level field of the
    file on `fd` (a Perfetto trace: its packets, field 1), as file offsets,
    read `chunk` bytes at a time: memory stays one chunk, and a field longer
    than that is stepped over unread.  Where the file stops being protobuf,
    ProtoError with the field's offset; where a field runs past the end of
    the file, ProtoCut with its offset and (key and length whole) its length."""
    size = os.fstat(fd).st_size
    pos = 0
    while pos < size:
        buf = os.pread(fd, chunk, pos)
        n, at = len(buf), 0
        to_eof = pos + n >= size
        while at < n:
            if buf[at] == 0x0A and at + 1 < n and buf[at + 1] < 0x80:  # the usual: a packet under 128 bytes
                number, wire, start, stop = 1, WIRE_LEN, at + 2, at + 2 + buf[at + 1]
            else:
                try:
                    number, wire, _, start, stop = _field(buf, at, n)
                except ProtoCut:
                    if to_eof:
                        raise ProtoCut("the file ends inside a field's key or length", pos + at) from None
                    break  # the key or length goes on in the next chunk
                except ProtoError as e:
                    raise ProtoError(str(e), pos + at) from None
            if pos + stop > size:
                raise ProtoCut("a field runs past the end of the file", pos + at, stop - at)
            yield number, wire, pos + start, pos + stop
            at = stop
        if at == 0 and not to_eof:  # cannot happen with chunk > 20 (a key and a length at most)
            raise ProtoError("a field's key and length span more than a chunk", pos)
        pos += at


def fields(buf: bytes):
    """(field number, wire type, value) of a message, value an int (varint),
    bytes (length-delimited) or None (fixed); stops quietly at anything malformed."""
    try:
        for number, wire, value, start, stop in iter_fields(buf):
            yield number, wire, value if wire == WIRE_VARINT else buf[start:stop] if wire == WIRE_LEN else None
    except ProtoError:
        return


def packet_spans(buf):
    """(start, stop) of each TracePacket (field 1 of Trace) in a trace's bytes,
    without parsing them; ProtoError where the bytes are not a Trace."""
    for number, wire, _, start, stop in iter_fields(buf):
        if number == 1 and wire == WIRE_LEN:
            yield start, stop
