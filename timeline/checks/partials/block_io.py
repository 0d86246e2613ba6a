"""block_io (sql/block_io.sql) as a partial computed at conversion.

The SQL is in map-reduce form. The partial builds its map table (_tl_bio_part) as the SQL would on
the recording converted as ONE trace (one chunk, no request cut: no 'piece' rows), streaming as the
converter writes the block requests, and `merge` runs the SQL's own reduce part on those rows in
SQLite (traceset.reduce_rows), so the numbers are formatted by the SQL itself.

Held per device (bounded): the request count, exact latencies with their counts while the device has
at most EXACT requests (the SQL's rule on the one trace), else counts per log bucket; the bytes, the
longest request (earliest among equals); per issuing thread, its requests of at least p99_warn_ms.
D sleep: each thread's thread_state rows (`_sched.py`) summed where the state is D*.
The set's part holds the rows; chunk parts are empty.

No partial (the SQL runs) where there is no block request, a request has a negative duration, a
thread it would name (a slow issuer, one of the D sleepers of >= 1 ms) is unnamed or in no process
for the converter, `_sched.py` cannot say a thread's states, or for other parameters than the defaults.
"""
from __future__ import annotations

import math

import numpy as np

from ..catalog import BY_ID
from ...converters.model import OUTSIDE_TID
from ._gpu import made_with
from ._reduce import reduced
from ._sched import SchedColumns

CHECK = "block_io"
VERSION = 1
CAT = "block_io"
EXACT = 4096  # a device's latencies are exact up to this many requests (the SQL's sketch)
COLUMNS = ["kind", "dev", "val", "bucket", "cnt", "tid", "name", "ts", "dur", "span_id"]
_LN = math.log(1.01)


def bucket(dur: int) -> int:
    """The SQL's iif(dur >= 1, cast(floor(ln(dur) / ln(1.01)) as int), -1)."""
    return math.floor(math.log(dur) / _LN) if dur >= 1 else -1


class _Dev:
    __slots__ = ("n", "vals", "buckets", "bytes", "max_dur", "max_ts", "slow")

    def __init__(self):
        self.n = 0
        self.vals: dict[int, int] = {}     # latency -> requests, while n <= EXACT
        self.buckets: dict[int, int] | None = None  # bucket -> requests, past EXACT
        self.bytes = None
        self.max_dur = self.max_ts = None
        self.slow: dict[int, int] = {}     # issuing tid -> requests of >= p99_warn_ms


class BlockColumns:
    """The block requests (async slices of category 'block_io'), aggregated per device as they pass."""

    def __init__(self, pid_of=None):
        self.pid_of = pid_of or (lambda tid: tid)
        self.devs: dict[str, _Dev] = {}
        self.slow_ns = BY_ID[CHECK].defaults()["p99_warn_ms"] * 1e6
        self.declined = ""

    def async_slice(self, track, ts, dur, name, cat, args=None) -> None:
        if cat != CAT or self.declined:
            return  # (one call per request: the converter writes them one by one)
        args = args or {}
        dur = int(dur)
        if dur < 0:
            self.declined = "a request of negative duration"
            return
        dev = args.get("dev")
        dev = str(dev) if dev is not None else (str(track) if track is not None else "?")
        d = self.devs.get(dev)
        if d is None:
            d = self.devs[dev] = _Dev()
        d.n += 1
        if d.buckets is None:
            d.vals[dur] = d.vals.get(dur, 0) + 1
            if d.n > EXACT:  # from now on the one trace's SQL ships buckets: fold the exact values
                d.buckets = {}
                for v, c in d.vals.items():
                    b = bucket(v)
                    d.buckets[b] = d.buckets.get(b, 0) + c
                d.vals = {}
        else:
            b = bucket(dur)
            d.buckets[b] = d.buckets.get(b, 0) + 1
        nb = args.get("bytes")
        if nb is not None:
            d.bytes = int(nb) + (d.bytes or 0)
        if d.max_dur is None or dur > d.max_dur or (dur == d.max_dur and int(ts) < d.max_ts):
            d.max_dur, d.max_ts = dur, int(ts)
        tid = args.get("tid")
        if tid is not None and dur >= self.slow_ns:
            d.slow[int(tid)] = d.slow.get(int(tid), 0) + 1


Collector = (BlockColumns, SchedColumns)


def _row(kind, dev=None, val=None, bkt=None, cnt=None, tid=None, name=None, ts=None, dur=None) -> list:
    return [kind, dev, val, bkt, cnt, tid, name, ts, dur, None]


def _thread(sched: SchedColumns, tid: int):
    """The thread's name as the trace has it, or None where the partial cannot be sure of it."""
    name = sched._name(tid)
    return name if name and sched.pid_of(tid) is not None else None


def part(collectors, starts) -> dict | None:
    bio, sched = collectors
    if bio.declined or not bio.devs or sched.model is None:
        return None
    rows = []
    for dev in sorted(bio.devs):
        d = bio.devs[dev]
        if d.buckets is None:
            rows += [_row("lat", dev, v, bucket(v), c) for v, c in sorted(d.vals.items())]
        else:
            rows += [_row("lat", dev, None, b, c) for b, c in sorted(d.buckets.items())]
        rows.append(_row("max", dev, d.bytes, ts=d.max_ts, dur=d.max_dur))
        for tid, c in sorted(d.slow.items()):
            name = _thread(sched, tid)
            if name is None:
                return None
            rows.append(_row("slow", dev, cnt=c, tid=tid, name=name))
    d_rows = _d_sleep(sched)
    if d_rows is None:
        return None
    return {"set": {"version": VERSION, "params": BY_ID[CHECK].defaults(), "rows": rows + d_rows},
            "chunks": [{} for _ in range(len(starts))]}


def _d_sleep(sched: SchedColumns):
    """The map's 'D' rows that can matter (a thread's D time of >= 1 ms: the reduce drops the rest),
    or None: not certain."""
    if sched.declined:
        return None  # over its row cap (it then holds no switches: not "none")
    if not sched.sw:
        return []  # no switches: no thread_state rows
    cols = sched._columns()
    if cols is None:
        return None  # declined (over its row cap)
    sw, wk, fk = cols
    out = []
    for tid in np.unique(np.r_[sw["prev"], sw["next"], wk["woken"], fk["child"]]).tolist():
        if tid in (0, OUTSIDE_TID):
            continue  # the idle task has no rows; the tasks outside the recording are in no process
        st = sched.thread_states(tid)
        if st is None:
            return None
        d = np.char.startswith(st["state"].astype(str), "D") & (st["dur"] > 0)  # glob 'D*' (None: 'None')
        total = int(st["dur"][d].sum())
        if total < 1e6:
            continue
        name = _thread(sched, tid)
        if name is None:
            return None
        out.append(_row("D", tid=tid, name=name, dur=total))
    return out


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows: its SQL's reduce part run on the map rows of the set's part (None where the
    partial does not apply: run the SQL)."""
    if not made_with(set_part, VERSION, params):
        return None
    return reduced(CHECK, params, COLUMNS, set_part["rows"])
