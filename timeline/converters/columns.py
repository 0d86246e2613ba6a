"""Many variable-length byte records built at once with numpy.

A family converter hands the TrackSinks whole columns (timestamps, tids,
argument values) for a block of calls; the sinks encode every record of the
block, protobuf packets or JSON lines, without a Python step per record.

`Rows(n)` collects n records piece by piece, left to right.  A piece is a
column of byte strings, one per record, stored as an n x w uint8 matrix with
a length per record (<= w; 0 = the piece is absent from that record), its
bytes at the left of the row (or at the right: digits are computed
right-aligned): constant bytes, varints, decimal or hex digits, strings
gathered from a small table.  `ragged()` lays the pieces side by side and
keeps each record's `len` bytes of each piece: one boolean-mask copy for the
whole block, none when every piece has one length (a plain reshape).
Lengths are known before building, so length prefixes (nested protobuf
messages) are just more varint pieces.

The padded matrix costs its full width for every record, so the sinks build
records that have the same arguments together (interface.groups_by_args).
"""
from __future__ import annotations

import numpy as np

_U64 = np.uint64
_SHIFT7 = np.arange(0, 70, 7, dtype=_U64)
_VARINT_AT = np.array([1 << (7 * k) for k in range(1, 10)], dtype=_U64)  # first value of k+1 bytes
_POW10_AT = np.array([10 ** k for k in range(1, 20)], dtype=_U64)        # first value of k+1 digits
_HEX_AT = np.array([1 << (4 * k) for k in range(1, 16)], dtype=_U64)
_COLS = np.arange(1 << 16)
# digit strings of 0..9999 (4 bytes each) and of one byte in hex (2 bytes)
_DEC4 = np.frombuffer("".join(f"{i:04d}" for i in range(10000)).encode(), np.uint8).reshape(10000, 4)
_HEX2 = np.frombuffer("".join(f"{i:02x}" for i in range(256)).encode(), np.uint8).reshape(256, 2)


def as_u64(values) -> np.ndarray:
    """Integers as uint64 bit patterns (negative int64 -> two's complement)."""
    a = np.asarray(values)
    if a.dtype == _U64:
        return a
    return a.astype(np.int64, copy=False).view(_U64)


def varint_lens(values) -> np.ndarray:
    """Byte length of each value's varint."""
    u = as_u64(values)
    lens = np.ones(u.size, np.int64)
    if u.size:
        top = int(u.max())
        for at in _VARINT_AT.tolist():  # most values are small: stop at the largest one's length
            if top < at:
                break
            lens += u >= _U64(at)
    return lens


def varints(values) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varints: (n x w matrix, lengths), left-aligned.  Negative
    ints take 10 bytes, as protobuf encodes int32/int64."""
    u = as_u64(values)
    if u.size == 0:
        return np.zeros((0, 1), np.uint8), np.zeros(0, np.int64)
    if int(u.max()) < 128:
        return u.astype(np.uint8)[:, None], np.ones(u.size, np.int64)
    lens = varint_lens(u)
    nb = int(lens.max())
    m = ((u[:, None] >> _SHIFT7[:nb]) & _U64(0x7F)).astype(np.uint8)
    m |= (_COLS[:nb] < (lens - 1)[:, None]).astype(np.uint8) << 7
    return m, lens


def decimals(values) -> tuple[np.ndarray, np.ndarray]:
    """ASCII decimal of non-negative integers (uint64 range), right-aligned."""
    u = np.asarray(values).astype(_U64, copy=False)
    if u.size == 0:
        return np.zeros((0, 1), np.uint8), np.zeros(0, np.int64)
    lens = np.searchsorted(_POW10_AT, u, side="right") + 1
    w = int(lens.max())
    groups = []
    q = u
    for _ in range((w + 3) // 4):  # four digits at a time, from the right
        groups.append(_DEC4[(q % _U64(10000)).astype(np.intp)])
        q = q // _U64(10000)
    m = np.concatenate(groups[::-1], axis=1) if len(groups) > 1 else groups[0]
    return m[:, m.shape[1] - w:], lens


def signed_decimals(values) -> tuple[np.ndarray, np.ndarray]:
    """ASCII decimal of int64 (or uint64) values, '-' for negatives, right-aligned."""
    a = np.asarray(values)
    if a.dtype == _U64 or not (a < 0).any():
        return decimals(a)
    a = a.astype(np.int64, copy=False)
    neg = a < 0
    mag = np.where(neg, -(a + 1), a).astype(_U64) + neg.astype(_U64)  # |int64 min| fits in uint64
    m, lens = decimals(mag)
    out = np.zeros((a.size, m.shape[1] + 1), np.uint8)
    out[:, 1:] = m
    rows = np.flatnonzero(neg)
    out[rows, out.shape[1] - 1 - lens[rows]] = ord("-")
    return out, lens + neg


def hexes(values) -> tuple[np.ndarray, np.ndarray]:
    """Lowercase hex digits of uint64 values (Python's f'{v:x}'), right-aligned."""
    u = as_u64(values)
    if u.size == 0:
        return np.zeros((0, 1), np.uint8), np.zeros(0, np.int64)
    lens = np.searchsorted(_HEX_AT, u, side="right") + 1
    w = int(lens.max())
    m = _HEX2[u.astype(">u8").view(np.uint8).reshape(u.size, 8)].reshape(u.size, 16)
    return m[:, 16 - w:], lens


def table(strings: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Byte strings as a padded matrix + lengths, for `Rows.gather`."""
    lens = np.array([len(s) for s in strings], np.int64)
    w = max(1, int(lens.max()) if lens.size else 1)
    m = np.zeros((len(strings), w), np.uint8)
    for i, s in enumerate(strings):
        m[i, :len(s)] = np.frombuffer(s, np.uint8)
    return m, lens


class Rows:
    """n byte records under construction (see the module docstring)."""

    def __init__(self, n: int):
        self.n = n
        # (matrix, lengths or None when every record has all w bytes, right-aligned?)
        self.pieces: list[tuple[np.ndarray, np.ndarray | None, bool]] = []
        self._const = bytearray()  # constant bytes not yet stored as a piece

    def _flush(self) -> None:
        if self._const:
            m = np.frombuffer(bytes(self._const), np.uint8)
            self.pieces.append((np.broadcast_to(m, (self.n, m.size)), None, False))
            self._const.clear()

    def const(self, b: bytes, present=None) -> "Rows":
        """The same bytes in every record (or in those where present)."""
        if present is None or present.all():
            self._const += b
            return self
        m = np.frombuffer(b, np.uint8)
        return self.piece(np.broadcast_to(m, (self.n, m.size)), np.where(present, m.size, 0))

    def piece(self, m: np.ndarray, lens: np.ndarray, present=None, right: bool = False) -> "Rows":
        self._flush()
        if present is not None and not present.all():
            lens = np.where(present, lens, 0)
        elif lens.size and lens.min() == m.shape[1] and lens.max() == m.shape[1]:
            lens = None
        self.pieces.append((m, lens, right))
        return self

    def varint(self, values, present=None) -> "Rows":
        return self.piece(*varints(values), present)

    def decimal(self, values, present=None) -> "Rows":
        return self.piece(*signed_decimals(values), present, right=True)

    def hex(self, values, present=None) -> "Rows":
        """'0x' and the hex digits."""
        m, lens = hexes(values)
        return self.const(b"0x", present).piece(m, lens, present, right=True)

    def gather(self, tab: tuple[np.ndarray, np.ndarray], codes, present=None) -> "Rows":
        """Record i gets string codes[i] of a `table()`."""
        m, lens = tab
        return self.piece(m[codes], lens[codes], present)

    def mask(self, present) -> "Rows":
        """Drop every piece so far from the records where present is False."""
        self._flush()
        self.pieces = [(m, np.where(present, m.shape[1] if lens is None else lens, 0), r)
                       for m, lens, r in self.pieces]
        return self

    def extend(self, other: "Rows") -> "Rows":
        """Append another Rows' pieces (same n)."""
        other._flush()
        self._flush()
        self.pieces += other.pieces
        return self

    def total(self) -> np.ndarray:
        """Byte length of each record so far."""
        self._flush()
        total = np.zeros(self.n, np.int64)
        total += sum(m.shape[1] for m, lens, _ in self.pieces if lens is None)
        for m, lens, _ in self.pieces:
            if lens is not None:
                total += lens
        return total

    def ragged(self) -> tuple[np.ndarray, np.ndarray]:
        """(all records' bytes concatenated, length of each record)."""
        self._flush()
        if not self.pieces or self.n == 0:
            return np.zeros(0, np.uint8), np.zeros(self.n, np.int64)
        W = sum(m.shape[1] for m, _, _ in self.pieces)
        big = np.empty((self.n, W), np.uint8)
        if all(lens is None for _, lens, _ in self.pieces):
            off = 0
            for m, _, _ in self.pieces:
                big[:, off:off + m.shape[1]] = m
                off += m.shape[1]
            return big.reshape(-1), np.full(self.n, W, np.int64)
        keep = np.ones((self.n, W), bool)  # one fill; then only the pieces of varying length
        off = 0
        for m, lens, right in self.pieces:
            w = m.shape[1]
            big[:, off:off + w] = m
            cols = _COLS[:w] if w <= _COLS.size else np.arange(w)
            if lens is None:
                pass
            elif right:
                np.greater_equal(cols, (w - lens)[:, None], out=keep[:, off:off + w])
            else:
                np.less(cols, lens[:, None], out=keep[:, off:off + w])
            off += w
        return big[keep], self.total()

    def build(self) -> bytes:
        """All records, concatenated in order."""
        return self.ragged()[0].tobytes()
