"""Protobuf wire encoding by hand, for the hot paths of the Perfetto writer.

Building upb messages costs several microseconds per event; the packets we
write millions of (compact sched arrays, TrackEvent begin/end/counter) are
simple enough to encode directly: a field is a varint key (number << 3 |
wire type) followed by a varint, 8 fixed bytes, or a length and bytes.
"""
from __future__ import annotations

import struct

import numpy as np


VARINT, I64, LEN = 0, 1, 2  # wire types: varint, 8 fixed bytes, length-delimited

# Field keys, interned ids and most small ints fit in two bytes: precomputed.
_SMALL = [bytes((i,)) for i in range(128)] + [bytes(((i & 0x7F) | 0x80, i >> 7)) for i in range(128, 1 << 14)]


def varint(n: int) -> bytes:
    if 0 <= n < 16384:
        return _SMALL[n]
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SHIFTS = np.arange(0, 70, 7, dtype=np.uint64)
_COLS = np.arange(10)


def packed_varints(values: np.ndarray) -> bytes:
    """Varint-encode a whole integer array at once (negatives as 10-byte
    two's complement, as protobuf does for int32/int64)."""
    u = values.astype(np.int64, copy=False).view(np.uint64)
    if u.size == 0:
        return b""
    nb = max(1, (int(u.max()).bit_length() + 6) // 7)
    if nb == 1:
        return u.astype(np.uint8).tobytes()
    groups = ((u[:, None] >> _SHIFTS[:nb]) & np.uint64(0x7F)).astype(np.uint8)
    lens = np.ones(u.size, np.int64)
    for k in range(1, nb):
        lens += u >= np.uint64(1 << (7 * k))
    cols = _COLS[:nb]
    groups |= (cols < (lens - 1)[:, None]).astype(np.uint8) << 7
    return groups[cols < lens[:, None]].tobytes()


def f_len(num: int, payload: bytes) -> bytes:
    return _SMALL[num << 3 | 2] + varint(len(payload)) + payload


def f_varint(num: int, value: int) -> bytes:
    return _SMALL[num << 3] + varint(value)


def f_packed(num: int, values: np.ndarray) -> bytes:
    return f_len(num, packed_varints(values)) if values.size else b""



def key(num: int, wire: int) -> bytes:
    return varint(num << 3 | wire)


def f_fixed64(num: int, value: int) -> bytes:
    return key(num, 1) + struct.pack("<Q", value & ((1 << 64) - 1))


def f_double(num: int, value: float) -> bytes:
    return key(num, 1) + struct.pack("<d", value)
