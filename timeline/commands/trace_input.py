"""What a trace file is, from its first bytes, before trace_processor reads it:
a raw log or a cut-off gzip otherwise fail later with a misleading message."""
from __future__ import annotations

import zlib

from ..errors import UserError
from ..rawlog import MAGIC
from ..terminal import printable

_CHUNK = 1 << 20


def check_trace_file(path: str) -> None:
    """UserError (one line) for inputs trace_processor would misread."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC))
            if not head:
                raise UserError(f"{printable(path)} is empty")
            if head[:5] == MAGIC[:5]:
                raise UserError(f"{printable(path)} is a timeline raw log, not a trace: "
                                f"run `timeline convert {printable(path)}` first")
            if head[:2] == b"\x1f\x8b":
                f.seek(0)
                _check_gzip(f, path)
    except OSError as e:
        raise UserError(f"cannot read {printable(path)}: {e.strerror}") from None


def _check_gzip(f, path: str) -> None:
    """Decompress to nowhere: a truncated or corrupt member is caught here
    (trace_processor would load half the events and report missing tables)."""
    d, fed = zlib.decompressobj(wbits=31), False
    try:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            while chunk:
                if not fed and not chunk.strip(b"\0"):
                    return  # zero padding after the last member
                fed = True
                d.decompress(chunk, _CHUNK)  # bounded output: memory stays small
                chunk = d.unconsumed_tail
                if d.eof:  # another member may follow (concatenated gzip)
                    chunk, d, fed = d.unused_data + chunk, zlib.decompressobj(wbits=31), False
    except zlib.error as e:
        raise UserError(f"{printable(path)} is a corrupt gzip file ({e})") from None
    if fed:
        raise UserError(f"{printable(path)} is a truncated gzip file (cut off before its end)")
