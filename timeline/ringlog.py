"""--ring: the raw log as a bounded series of segment files (issue 15).

Each segment is a whole raw log of its own (``<raw>.seg000001``...): the
recording's header, then the *carried state* (every META block but the
header, every proc-ring block written so far, and the rows a family marks as
bookkeeping (always_keep: kernel registrations, NCCL communicators): process
tree, thread names, libraries, maps, ranks), then the blocks written while it was the
current segment.  A new segment starts every ``keep/4`` seconds; a segment
whose last block is older than ``keep`` is deleted.  So at any time the disk
holds about ``keep + 2 * keep/4`` seconds of events plus one copy of the
state per segment, whatever the run's length.

A dump (:meth:`SegmentedLog.dump`) writes one ordinary raw log: the header,
the oldest kept segment's carried state, then every kept segment's own
blocks, with records of the event rings (all but proc) older than
``now - keep`` cut off by their own timestamps, so the dump covers exactly
the last ``keep`` seconds and knows every process and thread alive in them.

The carried state grows with the number of processes and threads created
(tens of bytes each), not with time.
"""
from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass

from . import proc_records
from .capture import CaptureWindow, as_rows, copy_cut, timed_strides
from .errors import UserError
from .rawlog import KIND_META, KIND_RING, RawLogFull, RawLogReader, RawLogWriter, dumps_meta
from .safe_output import as_user, remove

SEGMENTS_PER_WINDOW = 4


def boottime_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


@dataclass
class Segment:
    path: str
    start_ns: int
    carried: int      # blocks of carried state after the header
    fd: int = -1      # held for reading it back (dumps): the name is the user's and may be swapped
    end_ns: int = 0   # when the last block was written (0: still current)
    size: int = 0

    def drop(self, user) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        remove(self.path, user)


def _link_name(tmp: str, path: str) -> str:
    """Run as the user: link `tmp` to `path`, else to an unpredictable name
    next to it, and drop `tmp`; the name it now has (tmp if no link could be made)."""
    for name in (path, f"{path}-{secrets.token_hex(4)}"):
        try:
            os.link(tmp, name)
        except FileExistsError:
            continue
        except OSError:  # no hard links on this file system: it keeps its temporary name
            return tmp
        os.unlink(tmp)
        return name
    return tmp


class SegmentedLog:
    """RawLogWriter's interface (write_block/meta/ring, finish, close) over segments."""

    def __init__(self, path: str, header: dict, keep_s: float, *, user=None, mode: int = 0o600):
        self.path, self.header, self.user, self.mode = path, header, user, mode
        self.keep_ns = int(keep_s * 1e9)
        self.seg_ns = max(self.keep_ns // SEGMENTS_PER_WINDOW, 1)
        self._state: list[tuple[bytes, int, bytes]] = []  # (kind, ring, payload) carried forward
        self.segments: list[Segment] = []
        self.total_bytes = 0  # over all segments ever written (the summary's "ring wrote")
        self.max_disk = 0     # most bytes the kept segments took at once
        self._n = 0
        self.writer: RawLogWriter | None = None
        # callable(ring, rows) -> mask or None: a family's bookkeeping rows (kernel
        # registrations, NCCL communicators) that later records need; carried like
        # the proc ring (the recorder sets it to its plugins' always_keep)
        self.always = None
        self.frozen = False  # recording is stopping: no more rotations (nothing the exit dump needs is dropped)
        self._strides = {int(k): v["stride"] for k, v in header["rings"].items()}
        self.warnings: list[str] = []  # what went wrong, for the summary, unless `warn` is replaced
        self.warn = self.warnings.append  # callable(line): a segment that could not be created (said once)
        self._warned = False
        self._next_rotation = 0
        self.writer, seg = self._new_segment(boottime_ns())
        self.segments.append(seg)

    # -- writing ------------------------------------------------------------
    def _create(self, n: int) -> RawLogWriter:
        """Segment n's writer, created under OutputFile's unpredictable temporary
        name, then given its usual name by link(), which replaces nothing: a
        name planted in advance (by the target, or by another user in a sticky
        /tmp) means another, unpredictable one, and the Segment records
        whichever it got.  What the name names later does not matter: the
        segment is read back through its descriptor.  OSError or UserError when
        it cannot be created; RawLogFull when there is no room."""
        w = RawLogWriter(f"{self.path}.seg{n:06d}", {**self.header, "ring_segment": n}, mode=self.mode,
                         user=self.user, background=True, publish=False)
        try:
            w.path = as_user(self.user, lambda: (_link_name(w.path, f"{self.path}.seg{n:06d}"), None))[0]
        except BaseException:
            w.close()
            remove(w.path, self.user)
            raise
        return w

    def _new_segment(self, now: int) -> tuple[RawLogWriter, Segment]:
        w = self._create(self._n + 1)
        try:
            for kind, ring, payload in self._state:
                w.write_block(kind, payload, ring)
            seg = Segment(w.path, now, len(self._state), fd=w.read_fd())
        except BaseException:
            w.close()
            remove(w.path, self.user)
            raise
        self._n += 1
        self._next_rotation = now + self.seg_ns
        return w, seg

    def _close_current(self, now: int) -> None:
        w, seg = self.writer, self.segments[-1]
        w.close()
        seg.end_ns, seg.size = now, w.bytes_written
        self.total_bytes += w.bytes_written

    def _rotate(self, now: int) -> None:
        # the new segment first: if it cannot be created, the current one goes on
        try:
            w, seg = self._new_segment(now)
        except RawLogFull:
            raise  # no room: the recording stops (Recorder), as for a plain log
        except (OSError, UserError) as e:
            self._next_rotation = now + self.seg_ns  # try again one period later
            if not self._warned:
                self._warned = True
                why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
                self.warn(f"ring: cannot start a new segment ({why}); {self.segments[-1].path} goes on "
                          "growing instead")
            return
        self._close_current(now)
        self.writer = w
        self.segments.append(seg)
        # drop segments wholly older than the window (their state lives on in later ones)
        while len(self.segments) > 1 and self.segments[0].end_ns and self.segments[0].end_ns < now - self.keep_ns:
            self.segments.pop(0).drop(self.user)

    def disk_bytes(self) -> int:
        return sum(s.size for s in self.segments[:-1]) + self.writer.bytes_written

    @property
    def bytes_written(self) -> int:
        return self.total_bytes + self.writer.bytes_written

    def write_block(self, kind: bytes, payload, ring: int = 0) -> None:
        now = boottime_ns()
        if now >= self._next_rotation and not self.frozen:
            self._rotate(now)
        if kind == KIND_META or (kind == KIND_RING and ring == proc_records.RING_PROC):
            self._state.append((kind, ring, bytes(payload)))
        elif kind == KIND_RING and self.always is not None and ring in self._strides:
            rows = as_rows(payload, self._strides[ring])
            mask = self.always(ring, rows)
            if mask is not None and mask.any():
                self._state.append((kind, ring, rows[mask].tobytes()))
        self.writer.write_block(kind, payload, ring)
        self.max_disk = max(self.max_disk, self.disk_bytes())

    def write_meta(self, obj: dict) -> None:
        self.write_block(KIND_META, dumps_meta(obj))

    def write_ring(self, ring: int, data) -> None:
        self.write_block(KIND_RING, data, ring)

    # -- dumps --------------------------------------------------------------
    def dump(self, out_path: str, stats: dict, *, now: int | None = None, keep_fd: bool = False):
        """Write the last `keep` seconds as one finalized raw log at out_path.
        Returns its size, or with keep_fd (size, a descriptor on it for reading
        it back, which the caller closes).  The segments are read through the
        descriptors held on them, never by name.  The caller holds whatever
        lock keeps other writers out.  Raises RawLogFull (the partial dump is
        removed again: the segments still hold everything) or, when out_path
        cannot be created, UserError/OSError."""
        now = now or boottime_ns()
        try:
            self.writer.flush()
        except RawLogFull:
            pass  # the disk filled up: the segment is whole up to its last block, which is what is read
        cut = now - self.keep_ns
        window = CaptureWindow(cut)
        # rings whose records carry a timestamp are cut at the window's start; others go whole
        strides = timed_strides(self.header)
        out = RawLogWriter(out_path, {**self.header, "ring": {"keep_ns": self.keep_ns, "from_ns": cut,
                                                              "to_ns": now}},
                           mode=self.mode, user=self.user)
        fd = -1
        try:
            kept = [s for s in self.segments if not s.end_ns or s.end_ns >= cut]
            for i, seg in enumerate(kept):
                with RawLogReader(seg.fd, seg.path) as r:
                    for j, blk in enumerate(r.blocks()):
                        if j < seg.carried:
                            if i == 0:  # the state before the window, whole
                                out.write_block(blk.kind, blk.payload, blk.ring)
                            continue  # later segments' copies: already in from the first one
                        copy_cut(out, blk, window, strides, self.always)
            out.finish(stats)
            if keep_fd:
                fd = out.read_fd()
        except RawLogFull:
            out.close()
            remove(out_path, self.user)  # a dump cut short is worth less than the room it takes
            raise
        finally:
            out.close()
        return (out.bytes_written, fd) if keep_fd else out.bytes_written

    # -- end ----------------------------------------------------------------
    def flush(self) -> None:
        self.writer.flush()

    def finish(self, stats: dict) -> None:
        """The current segment is finalized like a plain log (a crash-safe record of the last state)."""
        self.writer.finish(stats)

    def close(self) -> None:
        if self.writer is not None and self.writer.fd >= 0:
            self._close_current(boottime_ns())

    def remove_segments(self) -> None:
        for seg in self.segments:
            seg.drop(self.user)
        self.segments.clear()

    def drop_stateless_tail(self) -> None:
        """Remove trailing segments that hold no event of their own, only the
        state carried into them (the disk filled as one was begun), so the
        last segment left holds the latest events."""
        while len(self.segments) > 1 and not self._has_events(self.segments[-1]):
            self.segments.pop().drop(self.user)

    @staticmethod
    def _has_events(seg: Segment) -> bool:
        if seg.fd < 0:
            return True  # cannot tell: keep it
        with RawLogReader(seg.fd, seg.path) as r:
            return any(j >= seg.carried and blk.kind == KIND_RING for j, blk in enumerate(r.blocks()))

    def release(self) -> None:
        """Let go of the segments' descriptors, leaving the files (they hold the recording)."""
        for seg in self.segments:
            if seg.fd >= 0:
                os.close(seg.fd)
                seg.fd = -1
