"""Pieces shared by the wasm and native engines: errors, results, protos.

Both engines speak trace_processor's own RPC protocol (the wasm one over an
in-process byte channel, the native one over HTTP), so both get back the same
`perfetto.protos.QueryResult` message and decode it with the same code here.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, Iterator, Optional

# Size of each TPM_APPEND_TRACE_DATA piece. trace_processor buffers a whole RPC
# message before parsing it, so pieces bound its transient memory.
APPEND_CHUNK = 16 * 1024 * 1024


class TraceProcessorError(Exception):
    """trace_processor rejected a request (bad SQL, crashed engine, ...)."""


class TraceLoadError(TraceProcessorError):
    """The trace could not be read or trace_processor could not parse it."""


class EngineOutOfMemory(TraceLoadError):
    """The engine ran out of memory (loading, or in a query): it is unusable
    now; a larger engine (memory64, native) may succeed."""


class QueryResult:
    """Rows of one query; cells are int / float / str / bytes / None."""

    __slots__ = ("columns", "rows")

    def __init__(self, columns: list[str], rows: list[tuple]):
        self.columns = columns
        self.rows = rows

    def as_dicts(self) -> list[dict[str, Any]]:
        cols = self.columns
        return [dict(zip(cols, r)) for r in self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.rows)

    def __repr__(self) -> str:
        return f"QueryResult(columns={self.columns!r}, rows=<{len(self.rows)}>)"


@functools.lru_cache(maxsize=1)
def protos():
    """Message classes for the trace_processor RPC (shipped by `perfetto`)."""
    from perfetto.trace_processor.platform import PlatformDelegate
    from perfetto.trace_processor.protos import ProtoFactory

    return ProtoFactory(PlatformDelegate())


# CellsBatch.CellType values (see trace_processor.proto).
_CELL_NULL, _CELL_VARINT, _CELL_FLOAT64, _CELL_STRING, _CELL_BLOB = 1, 2, 3, 4, 5


def _sql_error_text(text: str) -> str:
    """trace_processor's SQL error, with the actual error line first.

    It reports e.g. "Traceback (most recent call last):\n  File "stdin" line 1
    col 15\n    select * from nope\n    ^\nno such table: nope"; the header
    is noise to a caller and the last line is what `str(e)` should lead with.
    """
    lines = text.strip().splitlines()
    if len(lines) > 1 and lines[0].startswith("Traceback"):
        return "\n".join([lines[-1]] + lines[1:-1])
    return text.strip()


def decode_query_result(qr) -> QueryResult:
    """Turns a (merged) QueryResult proto into a QueryResult, or raises."""
    if qr.error:
        raise TraceProcessorError(_sql_error_text(qr.error))
    columns = list(qr.column_names)
    ncols = len(columns)
    cells: list = []
    for batch in qr.batch:
        # Each batch stores its values column-store style: one list per type,
        # plus `cells` saying which list the next value comes from.
        strings = batch.string_cells.split("\0") if batch.string_cells else []
        take = {
            _CELL_VARINT: iter(batch.varint_cells).__next__,
            _CELL_FLOAT64: iter(batch.float64_cells).__next__,
            _CELL_STRING: iter(strings).__next__,
            _CELL_BLOB: iter(batch.blob_cells).__next__,
        }
        cells.extend(None if c == _CELL_NULL else take[c]() for c in batch.cells)
    if not ncols:
        return QueryResult(columns, [])
    it = iter(cells)
    return QueryResult(columns, list(zip(*[it] * ncols)))


class BaseTraceProcessor:
    """Common driver: load a trace file in chunks, then answer queries.

    Subclasses implement `_append(bytes) -> error str`, `_finalize()`,
    `_query_proto(sql) -> QueryResult proto` and `_shutdown()`.
    """

    engine_name = "?"

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one RPC at a time per instance
        self._closed = False
        self.trace_path: Optional[str] = None

    # -- public API --------------------------------------------------------
    def load(self, path: str | os.PathLike, fd: Optional[int] = None) -> None:
        """Reads the trace into the engine.  fd: a descriptor on it (not
        closed here; `path` then only names it in messages), else `path` is
        opened as the invoking user in sudo mode, never through a symlink,
        regular files only (safe_input.open_input)."""
        from .. import safe_input
        from ..identity import invoking_user

        path = os.fspath(path)
        own = fd is None
        if own:
            try:
                fd = safe_input.open_input(path, invoking_user())
            except OSError as e:
                raise TraceLoadError(f"cannot open trace {path!r}: {e.strerror or e}") from None
        try:
            with self._lock:
                self._load_fd(fd, path)
        finally:
            if own:
                os.close(fd)
        self.trace_path = path

    def _load_fd(self, fd: int, path: str) -> None:
        total = 0
        while True:
            try:  # pread: the descriptor may be shared with the caller
                chunk = os.pread(fd, APPEND_CHUNK, total)
            except OSError as e:
                raise TraceLoadError(f"cannot read trace {path!r}: {e.strerror or e}") from None
            if not chunk:
                break
            total += len(chunk)
            err = self._append(chunk)
            if err:
                raise TraceLoadError(f"trace_processor cannot parse {path!r}: {err.strip()}")
        if total == 0:
            raise TraceLoadError(f"trace {path!r} is empty")
        self._finalize()

    def loaded(self, path: str | os.PathLike, fd: Optional[int] = None) -> "BaseTraceProcessor":
        """load(path, fd) and return self; on failure close the engine first."""
        try:
            self.load(path, fd)
        except BaseException:
            self.close()
            raise
        return self

    def query(self, sql: str) -> QueryResult:
        if self._closed:
            raise TraceProcessorError("trace processor is closed")
        with self._lock:
            qr = self._query_proto(sql)
        return decode_query_result(qr)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- engine hooks ------------------------------------------------------
    def _append(self, chunk: bytes) -> str:
        raise NotImplementedError

    def _finalize(self) -> None:
        raise NotImplementedError

    def _query_proto(self, sql: str):
        raise NotImplementedError

    def _shutdown(self) -> None:
        pass
