"""timeline/converters/columns.py: byte records built with numpy, against Python's own formatting."""
import random

import numpy as np

from timeline.converters.columns import Rows, decimals, hexes, signed_decimals, table, varints
from timeline.converters.perfetto.wire import varint

RNG = random.Random(5)
U64 = [RNG.randrange(0, 1 << RNG.choice([1, 7, 8, 14, 15, 31, 53, 63, 64])) for _ in range(3000)] + \
    [0, 1, 9, 10, 127, 128, 9999, 10000, 16383, 16384, 10 ** 19, (1 << 64) - 1]
I64 = [RNG.randrange(-(1 << 63), 1 << 63) for _ in range(3000)] + [-(1 << 63), -1, 0, 1, (1 << 63) - 1, -10]


def strings(m, lens, right=False):
    w = m.shape[1]
    return [bytes(m[i, w - n:] if right else m[i, :n]) for i, n in enumerate(lens.tolist())]


def test_varints_are_protobuf_varints():
    assert strings(*varints(np.array(U64, np.uint64))) == [varint(v) for v in U64]
    assert strings(*varints(np.array(I64, np.int64))) == [varint(v) for v in I64]  # negatives: 10 bytes


def test_decimal_and_hex_digits():
    assert strings(*decimals(np.array(U64, np.uint64)), right=True) == [str(v).encode() for v in U64]
    assert strings(*signed_decimals(np.array(I64, np.int64)), right=True) == [str(v).encode() for v in I64]
    assert strings(*hexes(np.array(U64, np.uint64)), right=True) == [f"{v:x}".encode() for v in U64]


def test_rows_build_each_record_in_order():
    n = 500
    vals = np.array([RNG.randrange(0, 1 << RNG.choice([6, 20, 40])) for _ in range(n)], np.uint64)
    neg = np.array([RNG.randrange(-1000, 1000) for _ in range(n)], np.int64)
    present = np.array([RNG.random() < 0.5 for _ in range(n)])
    codes = np.array([RNG.randrange(3) for _ in range(n)])
    words = [b"", b"x", b"longer string"]
    r = (Rows(n).const(b"<").varint(vals).const(b"|", present).hex(vals).const(b"/").decimal(neg)
         .gather(table(words), codes).const(b">"))
    want = [b"<" + varint(v) + (b"|" if p else b"") + f"{v:#x}/{d}".encode() + words[c] + b">"
            for v, p, d, c in zip(vals.tolist(), present.tolist(), neg.tolist(), codes.tolist())]
    assert r.total().tolist() == [len(w) for w in want]
    assert r.build() == b"".join(want)
    # every piece the same length: the fast path gives the same bytes
    same = Rows(3).const(b"ab").varint(np.array([1, 2, 3]))
    assert same.build() == b"ab\x01ab\x02ab\x03"
