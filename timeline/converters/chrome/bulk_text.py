"""Building many similar text lines with numpy instead of one format per line.

A line is a number or two plus pieces of text that repeat (a thread's name
and pid, a switch's arguments...).  Each distinct piece is built once in
Python; per line, numpy finds the piece's id (KeyIndex) and writes the
numbers as digits in bulk (decimal_times); one bytes.join over a Python list
interleaving numbers and pieces then makes the text.  That was the cheapest
assembly measured (~20 ns a line for the join): a uint8 table of fixed-width
rows with the padding squeezed out costs ~3x more (numpy's boolean
compaction goes byte by byte), and numpy object arrays are ~6x slower than
list slices at interleaving.
"""
from __future__ import annotations

import numpy as np

_M = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
      0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53)


class KeyIndex:
    """Exact map from rows of int64 key columns to dense ids 0, 1, 2... given
    in order of first sight: a vectorised open-addressing hash table.

    lookup() costs a few numpy passes when every key is already known (the
    common case once a conversion is under way); new keys take a slower path
    that only touches them.
    """

    def __init__(self, ncols: int, bits: int = 10):
        if not 1 <= ncols <= len(_M):
            raise ValueError("1 to %d key columns" % len(_M))
        self.ncols = ncols
        self.n = 0
        self._keys = np.zeros((ncols, 0), np.int64)  # by id, for rehashing
        self._alloc(bits)

    def _alloc(self, bits: int) -> None:
        self.bits = bits
        self.mask = (1 << bits) - 1
        self.slot_id = np.full(1 << bits, -1, np.int64)
        self.slot_key = np.zeros((self.ncols, 1 << bits), np.int64)

    def _slots(self, cols) -> np.ndarray:
        h = cols[0].astype(np.uint64)
        h *= np.uint64(_M[0])
        for k in range(1, self.ncols):
            h ^= cols[k].view(np.uint64)
            h *= np.uint64(_M[k])
        h >>= np.uint64(64 - self.bits)  # the well-mixed top bits
        return h.astype(np.int64)

    def lookup(self, cols) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """cols: ncols equal-length int64 arrays.  Returns (ids, new_ids,
        new_rows): the id of every row, and the ids first seen in this call
        with the index of a row holding each (ascending)."""
        cols = [np.ascontiguousarray(c, dtype=np.int64) for c in cols]
        slot = self._slots(cols)
        ids = self.slot_id[slot]
        ok = ids >= 0
        for k in range(self.ncols):
            ok &= self.slot_key[k][slot] == cols[k]
        none = np.zeros(0, np.int64)
        if ok.all():
            return ids, none, none
        # probe on for the rows not at their first slot; an empty slot means new
        pend = np.flatnonzero(~ok)
        s = slot[pend]
        missing = []
        while pend.size:
            sid = self.slot_id[s]
            empty = sid < 0
            match = ~empty
            for k in range(self.ncols):
                match &= self.slot_key[k][s] == cols[k][pend]
            ids[pend[match]] = sid[match]
            missing.append(pend[empty])
            go_on = ~(match | empty)
            pend, s = pend[go_on], (s[go_on] + 1) & self.mask
        rows = np.sort(np.concatenate(missing))
        if not rows.size:
            return ids, none, none
        keys = np.stack([c[rows] for c in cols], axis=1)
        uniq, first, inv = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        order = np.argsort(first)  # ids in the order rows first show them
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        new_ids = self.n + np.arange(order.size)
        self._add(uniq[order].T.copy(), new_ids)
        ids[rows] = new_ids[rank[inv.reshape(-1)]]
        return ids, new_ids, rows[first[order]]

    def _add(self, keys: np.ndarray, ids: np.ndarray) -> None:
        self._keys = np.concatenate([self._keys, keys], axis=1)
        self.n += ids.size
        if 2 * self.n > self.mask + 1:  # keep the load <= 1/2: short probes
            bits = self.bits
            while 2 * self.n > (1 << bits):
                bits += 1
            self._alloc(bits + 1)
            keys, ids = self._keys, np.arange(self.n)
        self._place(keys, ids)

    def _place(self, keys: np.ndarray, ids: np.ndarray) -> None:
        """Insert distinct absent keys: each takes the first free slot of its
        probe sequence; of keys reaching the same free slot the first wins and
        the others move on."""
        slot = self._slots(list(keys))
        pend = np.arange(ids.size)
        while pend.size:
            s = slot[pend]
            free = self.slot_id[s] < 0
            cand = pend[free]
            won_slot, first = np.unique(s[free], return_index=True)
            win = cand[first]
            self.slot_id[won_slot] = ids[win]
            self.slot_key[:, won_slot] = keys[:, win]
            left = np.ones(pend.size, bool)
            left[np.flatnonzero(free)[first]] = False
            pend = pend[left]
            taken = self.slot_id[slot[pend]] >= 0
            slot[pend[taken]] = (slot[pend[taken]] + 1) & self.mask


# two ASCII digits "00".."99" and "." + one digit, as little-endian uint16
_PAIRS = np.array([(48 + i // 10) | (48 + i % 10) << 8 for i in range(100)], "<u2")
_DOT_DIGIT = np.array([ord(".") | (48 + i) << 8 for i in range(10)], "<u2")


def decimal_times(ts: np.ndarray) -> list[bytes]:
    """b"<seconds>.<nanoseconds, 9 digits>" for each ts (non-negative int ns)."""
    if not ts.size:
        return []
    sec = ts // 1_000_000_000
    frac = (ts - sec * 1_000_000_000).astype(np.uint32)
    lo, hi = int(sec.min()), int(sec.max())
    if len(str(lo)) == len(str(hi)):  # the usual case: same width everywhere
        return _times(sec, frac, len(str(hi)), lo == hi)
    out = np.empty(ts.size, object)
    nd = np.full(ts.size, len(str(lo)))  # digits of each second count
    for k in range(len(str(lo)), len(str(hi))):
        nd += sec >= 10 ** k
    for d in range(len(str(lo)), len(str(hi)) + 1):
        rows = np.flatnonzero(nd == d)
        out[rows] = _times(sec[rows], frac[rows], d, False)
    return out.tolist()


def _times(sec: np.ndarray, frac: np.ndarray, width: int, same: bool) -> list[bytes]:
    """decimal_times of seconds that all have `width` digits (`same`: all equal)."""
    # one record per line, read back as fixed-width byte strings
    if same:  # one scalar for all (a void scalar assigns fastest)
        out = np.empty(sec.size, [("sec", f"V{width}"), ("frac", "<u2", (5,))])
        out["sec"] = np.void(str(int(sec[0])).encode())
    else:
        out = np.empty(sec.size, [("sec", "u1", (width,)), ("frac", "<u2", (5,))])
        put_digits(out["sec"], sec)
    # ".ddddddddd": "." and the first digit, then pairs of digits, as uint16
    txt = out["frac"]
    q = frac // np.uint32(100_000_000)
    txt[:, 0] = _DOT_DIGIT[q]
    frac = frac - q * np.uint32(100_000_000)
    for col, p in ((1, 1_000_000), (2, 10_000), (3, 100)):
        q = frac // np.uint32(p)
        txt[:, col] = _PAIRS[q]
        frac -= q * np.uint32(p)
    txt[:, 4] = _PAIRS[frac]
    return out.view(f"S{out.dtype.itemsize}").tolist()


def put_digits(out: np.ndarray, x: np.ndarray) -> None:
    """Write x (non-negative ints) in decimal, zero-padded to out's width.
    out: a (len(x), width) uint8 array."""
    dt = np.uint32 if x.size == 0 or int(x.max()) < (1 << 32) else np.uint64
    x = x.astype(dt)
    ten, zero = dt(10), dt(48)
    for col in range(out.shape[1] - 1, -1, -1):
        q = x // ten
        out[:, col] = x - q * ten + zero
        x = q


__all__ = ["KeyIndex", "decimal_times", "put_digits"]
