"""Where the recorder's raw log goes: one interface, two kinds.

  PlainLog   one raw log at the raw path (rawlog.RawLogWriter, written by a
             background thread), finalized at the end and converted as is.
  RingLog    --ring: bounded segment files (ringlog.SegmentedLog); the last
             DURATION is gathered into one ordinary raw log at the raw path
             at the end, and while recording on demand (dumps).

The recorder uses only this interface (open_raw_log picks the kind):

  write_block / write_meta / write_ring, flush, bytes_written
  start(always_keep, lock)  recording starts: the rows to carry, the writers' lock
  dump(why, stats)          the last DURATION now, as a raw log of its own (plain: nothing to do)
  recording_ends()          no data follows but the last drain's
  finish(stats)             the END block
  end(stats, disk_full)     -> RawLogEnd: the raw log to convert, or why there is none
  close(), discard()        (discard: loading failed, remove what was written)
  dumps                     how many dumps were written
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from .errors import UserError
from .rawlog import RawLogFull, RawLogWriter
from .ringlog import SegmentedLog
from .safe_output import remove


@dataclass(frozen=True)
class RingOptions:
    """--ring: keep only the last `keep_s` seconds."""
    keep_s: float
    dump_path: Callable[[int], str]  # n -> the raw log path of the n-th dump while recording
    # (raw path, n, fd): a dump was written (record converts it, reading it through
    # fd, a descriptor it then owns); None: the dump's raw log is all there is
    on_dump: Callable[[str, int, int], None] | None = None


@dataclass
class RawLogEnd:
    """What a recording left to convert."""
    # a descriptor on the finished raw log (the caller reads it back through this,
    # never by name, and closes it); -1 when there is none (see error)
    fd: int = -1
    size: int = 0               # bytes of the raw log at the raw path
    error: str | None = None    # --ring: why the raw log at the raw path could not be written
    kept_segments: list[str] = field(default_factory=list)  # ... so these hold the recording
    note: str | None = None     # a line for the summary


def open_raw_log(path: str, header: dict, user, ring: RingOptions | None, warn: Callable[[str], None]):
    """The raw log sink for a recording: a RingLog with `ring`, else a PlainLog.
    user: whom its files are created as and belong to (identity.InvokingUser);
    warn: callable(line), a problem to say while recording goes on."""
    try:
        if ring is not None:
            return RingLog(path, header, user, ring, warn)
        return PlainLog(path, header, user)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror}") from None


class _Sink:
    """What both kinds pass straight on to the writer they hold (`_log`)."""

    @property
    def bytes_written(self) -> int:
        return self._log.bytes_written

    def write_block(self, kind: bytes, payload, ring: int = 0) -> None:
        self._log.write_block(kind, payload, ring)

    def write_meta(self, obj: dict) -> None:
        self._log.write_meta(obj)

    def write_ring(self, ring: int, data) -> None:
        self._log.write_ring(ring, data)

    def flush(self) -> None:
        self._log.flush()


class PlainLog(_Sink):
    """The raw log as one file at its path."""

    dumps = 0  # a plain log keeps everything: it has no last DURATION to dump

    def __init__(self, path: str, header: dict, user):
        self.path, self.user = path, user
        self._log = RawLogWriter(path, header, user=user, background=True)

    def start(self, always_keep, lock) -> None:
        """Nothing to carry from one file to the next."""

    def dump(self, why: str, stats: Callable[[str], dict]) -> None:
        """Nothing to dump: the whole recording is in the one file."""

    def recording_ends(self) -> None:
        """Nothing to hold back."""

    def finish(self, stats: dict) -> None:
        self._log.finish(stats)

    def end(self, stats: dict, disk_full: RawLogFull | None) -> RawLogEnd:
        """The finished log itself, through a descriptor of its own."""
        return RawLogEnd(fd=self._log.read_fd() if self._log.fd >= 0 else -1, size=self._log.bytes_written)

    def close(self) -> None:
        self._log.close()

    def discard(self) -> None:
        self.close()
        remove(self.path, self.user)


class RingLog(_Sink):
    """--ring: the raw log as bounded segments, the last DURATION gathered on demand."""

    def __init__(self, path: str, header: dict, user, ring: RingOptions, warn: Callable[[str], None]):
        self.path, self.user, self.options, self._warn = path, user, ring, warn
        self._log = SegmentedLog(path, header, ring.keep_s, user=user)
        self._log.warn = warn  # a segment that cannot be created: said once, recording goes on
        self._lock = None
        self.dumps = 0

    def start(self, always_keep, lock) -> None:
        """always_keep(ring, rows) -> mask or None: a family's bookkeeping rows,
        carried into every segment like the proc ring; lock: held by whoever writes."""
        self._log.always = always_keep
        self._lock = lock

    def dump(self, why: str, stats: Callable[[str], dict]) -> None:
        """While recording: the last DURATION as a raw log of its own, handed to
        on_dump.  stats(reason): its END block.  A dump that cannot be written
        is one warning line; recording goes on."""
        self.dumps += 1
        n, path = self.dumps, self.options.dump_path(self.dumps)
        try:
            with self._lock:
                _, fd = self._log.dump(path, stats(f"dump {n} ({why})"), keep_fd=True)
        except RawLogFull as e:
            self._warn(f"dump {n} ({why}): no room for {path} ({e.strerror}); recording goes on")
            return
        except UserError as e:
            self._warn(f"dump {n} ({why}): {e}; recording goes on")
            return
        except OSError as e:
            self._warn(f"dump {n} ({why}): cannot write {path}: {e.strerror}; recording goes on")
            return
        if self.options.on_dump is not None:
            self.options.on_dump(path, n, fd)
        else:
            os.close(fd)

    def recording_ends(self) -> None:
        self._log.frozen = True  # the exit dump ends at stop_ts: keep every segment it reads

    def finish(self, stats: dict) -> None:
        """The current segment is finalized like a plain log (a crash-safe record of the last state)."""
        self._log.finish(stats)

    def end(self, stats: dict, disk_full: RawLogFull | None) -> RawLogEnd:
        """The last DURATION as one ordinary raw log at the raw path (the trace's
        source).  When that log cannot be written (no room, a name the target
        took), the segments stay and say where the recording is."""
        log, path = self._log, self.path
        ring_disk = max(log.max_disk, log.disk_bytes())
        log.close()
        error = None
        try:
            size, fd = log.dump(path, stats, now=stats["stop_ts"], keep_fd=True)
        except RawLogFull as e:
            error = f"no room for {path} ({e.strerror})"
        except UserError as e:
            error = str(e)
        except OSError as e:
            error = f"cannot write {path}: {e.strerror}"
        if error is not None:
            log.drop_stateless_tail()
            kept = [s.path for s in log.segments]
            log.release()
            return RawLogEnd(size=log.bytes_written, error=error, kept_segments=kept)
        if disk_full is not None:
            disk_full.kept = size  # what the trace is made from: the dump
        log.remove_segments()
        note = (f"ring: kept the last {self.options.keep_s:g}s; segments took at most {ring_disk:,} bytes on disk "
                f"({log.total_bytes:,} written in all)")
        return RawLogEnd(fd=fd, size=size, note=note)

    def close(self) -> None:
        self._log.close()

    def discard(self) -> None:
        self.close()
        self._log.remove_segments()
