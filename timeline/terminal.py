"""Text from the recorded program (thread names, paths, argv) on the terminal.

Such text may hold escape sequences (set the window title, hide or rewrite
lines) or undecodable bytes. Everything that reaches the terminal from a trace or
a target goes through `printable`; machine formats (JSON, CSV, the trace) keep
the text, escaped by their own rules.
"""
from __future__ import annotations

import re

# C0, DEL, C1, lone surrogates (undecodable bytes kept by surrogateescape), and the
# format characters that reorder or hide text (bidi overrides, zero-width marks)
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def _escape(m: re.Match) -> str:
    c = m.group()
    o = ord(c)
    if 0xDC80 <= o <= 0xDCFF:  # a byte os.fsdecode could not decode: show the byte
        return f"\\x{o - 0xDC00:02x}"
    if o < 0x100:
        return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(c, f"\\x{o:02x}")
    return f"\\u{o:04x}"


def printable(text) -> str:
    """`text` (str or anything str() accepts) with control characters shown as escapes."""
    s = text if isinstance(text, str) else str(text)
    return _UNSAFE.sub(_escape, s)


def printable_line(text) -> str:
    """A message for stderr: newlines kept between lines, each line made printable."""
    return "\n".join(printable(ln) for ln in str(text).split("\n"))


