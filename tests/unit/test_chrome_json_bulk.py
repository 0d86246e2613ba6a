"""The numpy helpers behind the Chrome JSON sched text (converters/chrome/bulk_text)."""
from __future__ import annotations

import numpy as np
import pytest

from timeline.converters.chrome.bulk_text import KeyIndex, decimal_times, put_digits


def _reference_ids(rows, seen: dict) -> list[int]:
    """Ids given in order of first sight, with a dict."""
    return [seen.setdefault(r, len(seen)) for r in rows]


@pytest.mark.parametrize("ncols", [1, 2, 4])
def test_key_index_matches_a_dict(ncols):
    rng = np.random.default_rng(ncols)
    ki, seen = KeyIndex(ncols, bits=2), {}  # tiny table: growth and long probes
    extremes = np.array([0, -1, 1, np.iinfo(np.int64).min, np.iinfo(np.int64).max], np.int64)
    pool = np.concatenate([rng.integers(-(1 << 62), 1 << 62, (300, ncols)),
                           rng.integers(0, 4, (40, ncols)),  # many keys differing in a bit or two
                           np.repeat(extremes[:, None], ncols, axis=1)])
    for size in (1, 7, 500, 3000, 3000, 50):
        rows = pool[rng.integers(0, len(pool), size)]
        before = len(seen)
        want = _reference_ids(map(tuple, rows.tolist()), seen)
        ids, new_ids, new_rows = ki.lookup([rows[:, k].copy() for k in range(ncols)])
        assert ids.tolist() == want
        assert new_ids.tolist() == list(range(before, len(seen)))
        # each new id's row is the first row holding it
        assert new_rows.tolist() == [want.index(i) for i in new_ids.tolist()]
    assert ki.n == len(seen) == len({tuple(r) for r in pool.tolist()})


def test_key_index_all_known_fast_path_and_empty():
    ki = KeyIndex(1)
    keys = np.arange(1000, dtype=np.int64) * 7919
    ids, new_ids, _ = ki.lookup([keys])
    assert ids.tolist() == list(range(1000)) and new_ids.size == 1000
    ids, new_ids, new_rows = ki.lookup([keys[::-1].copy()])
    assert ids.tolist() == list(range(999, -1, -1)) and new_ids.size == 0 and new_rows.size == 0
    ids, new_ids, _ = ki.lookup([np.zeros(0, np.int64)])
    assert ids.size == 0 and new_ids.size == 0


def test_decimal_times():
    rng = np.random.default_rng(3)
    cases = [np.array([0, 5, 999_999_999, 1_000_000_000, 10**10 - 1, 10**10]),
             np.sort(rng.integers(10**9, 10**9 + 10**6, 3000)),           # one second
             np.sort(rng.integers(9_999_000_000, 10_000_100_000, 3000)),  # 9 -> 10 s
             np.sort(rng.integers(0, 10**15, 3000)),                      # all widths at once
             rng.integers(0, 1 << 62, 3000),                              # seconds >= 2**32, unsorted
             np.array([123_456_789_012_345])]
    for ts in cases:
        ts = ts.astype(np.int64)
        want = [f"{t // 10**9}.{t % 10**9:09d}".encode() for t in ts.tolist()]
        assert decimal_times(ts) == want
    assert decimal_times(np.zeros(0, np.int64)) == []


def test_put_digits():
    x = np.array([0, 7, 42, 999, 12345, (1 << 40) + 3])
    out = np.zeros((x.size, 14), np.uint8)
    put_digits(out, x)
    assert [bytes(r) for r in out] == [f"{v:014d}".encode() for v in x.tolist()]
