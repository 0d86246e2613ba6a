"""The raw log: what `record` writes while recording, before any conversion.

Layout: an 8-byte magic, then blocks.  Each block is a 24-byte header
(kind: 4 ASCII bytes, ring id u32, payload length u64, crc32 u32, reserved u32)
followed by the payload:

- ``META``: a JSON object.  The first block is always META with
  ``"type": "header"`` (clock snapshot, rings, uname, command...).
  Later METAs carry process snapshots (``"type": "procs"``) and notes.
- ``RING``: bytes copied verbatim from one BPF ring buffer (record headers
  included); decode with :func:`timeline.events.decode_ring_bytes`.
- ``END!``: JSON with final stats (drops: records lost per ring and CPU;
  drop_causes: full / refused / retried per CPU, see BpfSession.drop_causes;
  exit code).  Its presence means the
  recording was finalized; a log without it was cut short (recorder killed)
  and is still convertible up to its last whole block.

Each block is written with one ``writev`` so a killed recorder leaves at most
one partial block at the tail; the reader stops there and reports it.
"""
from __future__ import annotations

import collections
import dataclasses
import errno
import os
import stat
import threading
import struct
import zlib
from typing import Iterator

import orjson

MAGIC = b"TLRAW\x00\x01\n"
BLOCK_HDR = struct.Struct("<4sIQII")
KIND_META = b"META"
KIND_RING = b"RING"
KIND_END = b"END!"
KNOWN_KINDS = (KIND_META, KIND_RING, KIND_END)
# A single block larger than this is treated as corruption, not a real length.
MAX_BLOCK = 1 << 31


# header fields the converters read, and the JSON types they must have (with
# those the families' plugins write: registry.HEADER_TYPES)
_HEADER_TYPES = {"clock": dict, "uname": dict, "ncpu": int, "rings": dict, "events": list,
                 "command": list, "mode": str, "target_pid": int, "recorder_pid": int}


def _display(v):
    """Names, paths and argv come from the kernel as bytes and reach us as str with
    surrogate escapes (os.fsdecode); JSON needs valid UTF-8, so each undecodable byte
    becomes a literal \\xNN here, the one place they are escaped."""
    if isinstance(v, str):
        return os.fsencode(v).decode("utf-8", "backslashreplace")
    if isinstance(v, dict):
        return {_display(k): _display(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_display(x) for x in v]
    return v


def dumps_meta(obj: dict) -> bytes:
    try:
        return orjson.dumps(obj)
    except TypeError:  # a str with surrogates somewhere: escape once, then it is plain UTF-8
        return orjson.dumps(_display(obj))

class RawLogError(Exception):
    """The file is not a timeline raw log, or cannot be read at all."""


class RawLogFull(OSError):
    """The file system holding the raw log is full (or over quota). The log
    was cut back to its last whole block, which `kept` bytes end."""

    def __init__(self, err: OSError, kept: int):
        super().__init__(err.errno, err.strerror)
        self.kept = kept


_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


@dataclasses.dataclass
class Block:
    kind: bytes
    ring: int
    payload: bytes
    offset: int

    def json(self) -> dict:
        return orjson.loads(self.payload)


class RawLogWriter:
    """Appends blocks to a raw log.

    With ``background=True`` blocks are handed to a writer thread through a
    queue bounded in bytes: whoever drains the ring buffers never waits for
    the disk (under writeback throttling a write can block for a second,
    longer than a busy ring takes to fill).  Blocks keep their order; a full
    queue makes callers wait, so memory stays bounded.  ``finish`` and
    ``close`` write out everything queued.  Errors from the writer thread are
    raised by the next call.
    """

    def __init__(self, path: str, header: dict, *, mode: int = 0o600, user=None,
                 background: bool = False, max_queued: int = 256 << 20, publish: bool = True):
        from .safe_output import OutputFile

        # Created under a temporary name and renamed into place at once, as
        # `user` in sudo mode (see safe_output); we keep writing through the
        # fd, so a killed recorder still leaves a convertible log at `path`.
        # publish=False: an intermediate only read back through read_fd(); it
        # keeps OutputFile's unpredictable temporary name (self.path), so no
        # name planted in advance can stand in its way.
        out = OutputFile(path, user, mode)
        try:
            if publish:
                out.commit()
        except BaseException:
            out.close()
            raise
        self.path = path if publish else out.tmp
        self._unpublished = None if publish else out  # removed again if the log cannot even start
        self.fd = out.fd
        self.bytes_written = 0  # accepted so far (queued or on disk)
        self.on_disk = 0        # written whole (a failed block is cut off again)
        self._queue: collections.deque | None = None
        self._error: BaseException | None = None
        try:
            self._write_all([MAGIC])
        except BaseException:  # no room even for the magic: the (empty) file stays, the fd does not
            self._abandon()
            raise
        self.bytes_written += len(MAGIC)
        if background:
            self._queue = collections.deque()
            self._queued = 0
            self._max = max_queued
            self._cond = threading.Condition()
            self._closing = False
            self._thread = threading.Thread(target=self._writer, name="timeline-rawlog", daemon=True)
            self._thread.start()
        try:
            self.write_meta({"type": "header", **header})
        except BaseException:
            self._abandon()
            raise
        self._unpublished = None

    def _abandon(self) -> None:
        self.close()
        if self._unpublished is not None:
            self._unpublished.discard()

    def read_fd(self) -> int:
        """A new descriptor on this log, for reading it back (the caller closes it):
        what was written here is read through it, never by name, which the
        user owns and may have pointed elsewhere since."""
        return os.dup(self.fd)

    def _write_all(self, parts) -> None:
        total = sum(memoryview(p).nbytes for p in parts)
        try:
            done = os.writev(self.fd, parts)
            if done != total:  # short write (disk full, signal): finish it
                rest = b"".join(bytes(p) for p in parts)[done:]
                while rest:
                    n = os.write(self.fd, rest)
                    rest = rest[n:]
        except OSError as e:
            if e.errno not in _FULL_ERRNOS:
                raise
            # Keep the log whole: cut the partial block off (which also gives
            # back the space it took) and say how much is kept.
            try:
                os.ftruncate(self.fd, self.on_disk)
                os.lseek(self.fd, self.on_disk, os.SEEK_SET)
            except OSError:
                pass
            raise RawLogFull(e, self.on_disk) from None
        self.on_disk += total

    def _writer(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                parts, size = self._queue.popleft()
            try:
                self._write_all(parts)
            except BaseException as e:  # disk full, I/O error: surfaced to the caller
                with self._cond:
                    self._error = e
                    self._queue.clear()
                    self._queued = 0
                    self._cond.notify_all()
                return
            with self._cond:
                self._queued -= size
                self._cond.notify_all()

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def write_block(self, kind: bytes, payload, ring: int = 0) -> None:
        mv = memoryview(payload).cast("B")
        hdr = BLOCK_HDR.pack(kind, ring, mv.nbytes, zlib.crc32(mv), 0)
        total = len(hdr) + mv.nbytes
        if self._queue is None:
            self._write_all([hdr, mv])
        else:
            with self._cond:
                self._check()
                while self._queued and self._queued + total > self._max and self._error is None:
                    self._cond.wait()
                self._check()
                self._queue.append(([hdr, mv], total))
                self._queued += total
                self._cond.notify_all()
        self.bytes_written += total

    def write_meta(self, obj: dict) -> None:
        self.write_block(KIND_META, dumps_meta(obj))

    def write_ring(self, ring: int, data) -> None:
        self.write_block(KIND_RING, data, ring)

    def _drain_queue(self) -> None:
        if self._queue is None or not self._thread.is_alive():
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        self._check()

    def flush(self) -> None:
        """Wait until every block queued so far is on disk (readers of the file see them)."""
        if self._queue is None:
            return
        with self._cond:
            while self._queued and self._error is None:
                self._cond.wait()
            self._check()

    def finish(self, stats: dict) -> None:
        self.write_block(KIND_END, dumps_meta({"type": "end", **stats}))
        self._drain_queue()
        os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            try:
                self._drain_queue()
            except RawLogFull:
                pass  # already raised to whoever wrote or finished; the log is whole up to on_disk
            finally:
                os.close(self.fd)
                self.fd = -1


@dataclasses.dataclass
class Damage:
    offset: int
    reason: str


class RawLogReader:
    """Reads blocks in order; stops cleanly at the first damaged block.

    `source`: an open descriptor (read with pread: its offset is untouched and
    it is not closed here), or a path, opened here without blocking and
    refused unless it is a regular file.  Whatever timeline wrote itself is
    read back through the descriptor it holds (never re-opened by name: the
    name belongs to the user, who may have swapped it); `name` is what
    messages call it.

    After iteration, ``damage`` says where and why reading stopped early (None
    when the log ended cleanly) and ``finalized`` whether an END block was seen.
    """

    def __init__(self, source, name: str | None = None):
        self.path = name or (f"raw log (fd {source})" if isinstance(source, int) else os.fspath(source))
        if isinstance(source, int):
            self._fd, self._own = source, False
        else:
            self._fd, self._own = self._open(os.fspath(source)), True
        try:
            self._pos = 0
            self.size = os.fstat(self._fd).st_size
            magic = self._read(len(MAGIC))
            if magic != MAGIC:
                if magic[:5] == MAGIC[:5]:
                    raise RawLogError(f"{self.path}: unsupported raw log version")
                raise RawLogError(f"{self.path} is not a timeline raw log")
            self.damage: Damage | None = None
            self.finalized = False
            self.header = self._read_header()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _open(path: str) -> int:
        # O_NONBLOCK: a FIFO at the name cannot hang us before it is refused
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as e:
            raise RawLogError(f"cannot open {path}: {e.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise RawLogError(f"cannot open {path}: not a regular file")
        return fd

    def _read(self, n: int) -> bytes:
        """Up to n bytes at the reading position, which moves past them."""
        data = os.pread(self._fd, n, self._pos)
        if 0 < len(data) < n:  # a short read before the end: finish it
            parts = [data]
            got = len(data)
            while got < n:
                more = os.pread(self._fd, n - got, self._pos + got)
                if not more:
                    break
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        self._pos += len(data)
        return data

    def _read_header(self) -> dict:
        blk = self._next_block()
        if blk is None or blk.kind != KIND_META:
            raise RawLogError(f"{self.path}: raw log has no header (file is empty or damaged)")
        try:
            hdr = blk.json()
        except orjson.JSONDecodeError:
            hdr = None
        if not isinstance(hdr, dict) or hdr.get("type") != "header":
            raise RawLogError(f"{self.path}: first block is not a header")
        from .registry import HEADER_TYPES  # not at import: the registry loads every descriptor

        for key, types in {**_HEADER_TYPES, **HEADER_TYPES}.items():  # a valid checksum does not make a sane header
            if hdr.get(key) is not None and not isinstance(hdr[key], types):
                raise RawLogError(f"{self.path}: header field {key!r} is malformed")
        if not all(isinstance(v, int) for v in (hdr.get("clock") or {}).values()):
            raise RawLogError(f"{self.path}: header field 'clock' is malformed")
        return hdr

    def _next_block(self) -> Block | None:
        off = self._pos
        raw = self._read(BLOCK_HDR.size)
        if not raw:
            return None
        if len(raw) < BLOCK_HDR.size:
            self.damage = Damage(off, "truncated block header")
            return None
        kind, ring, length, crc, _ = BLOCK_HDR.unpack(raw)
        if kind not in KNOWN_KINDS or length > MAX_BLOCK:
            self.damage = Damage(off, "corrupt block header")
            return None
        end = off + BLOCK_HDR.size + length
        if end > self.size:  # the log may have grown since (being written): look again
            self.size = max(self.size, os.fstat(self._fd).st_size)
        # never ask for more than the file holds: a crafted length must not cost memory
        payload = self._read(min(length, max(self.size - off - BLOCK_HDR.size, 0)))
        if len(payload) < length:
            self.damage = Damage(off, f"truncated block ({len(payload)} of {length} bytes)")
            return None
        if zlib.crc32(payload) != crc:
            self.damage = Damage(off, "checksum mismatch")
            return None
        return Block(kind, ring, payload, off)

    def blocks(self) -> Iterator[Block]:
        """Every block after the header, in file order."""
        while True:
            blk = self._next_block()
            if blk is None:
                return
            if blk.kind == KIND_END:
                self.finalized = True
            yield blk

    def close(self) -> None:
        if self._own and self._fd >= 0:
            os.close(self._fd)
        self._fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
