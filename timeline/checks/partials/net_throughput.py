"""net_throughput (sql/net_throughput.sql) as a partial computed at conversion.

The SQL's first two tables reduce each connection's 'net <conn> sent_bytes_per_s' /
'received_bytes_per_s' counter track to one row (_tl_nt: bytes, active ns, first ts, span), from
each sample's value and the time to the track's next sample (lead(); 10 ms for the last). The
collector holds those tracks' samples (a few per 10 ms bucket of traffic, nothing else) and at the
end of the conversion computes the rows as the SQL does; the set's part holds them, and merge runs
the rest of the check's own SQL on them in SQLite (so SQLite compares and prints the numbers).

bytes is a sum of doubles: SQLite adds them in its own order (with compensation), here it is the
exactly rounded sum (math.fsum). merge answers only where the rows print alike with every sum a
few ulps lower and higher. No partial (the SQL runs) past MAX_SAMPLES samples, or for other
parameters than the defaults.
"""
from __future__ import annotations

import math

import numpy as np

from ..catalog import BY_ID
from ..runner import render_sql
from ..traceset import reduce_rows
from ._gpu import made_with

CHECK = "net_throughput"
VERSION = 1
MAX_SAMPLES = 2_000_000        # all matching tracks' samples together (16 bytes each)
LAST_SPAN = 10_000_000         # the SQL's coalesce(span, 1e7)
SUFFIXES = (" sent_bytes_per_s", " received_bytes_per_s")
COLUMNS = ["name", "conn", "dir", "bytes", "active_ns", "ts", "dur"]
REST = "create or replace perfetto table _tl_nt_ends"  # where the SQL leaves the samples
ULPS = 4


def is_rate_track(name: str):
    """The suffix of a track the SQL reads (glob 'net *↔* sent_bytes_per_s' / received), or None."""
    if not name.startswith("net "):
        return None
    for s in SUFFIXES:
        if name.endswith(s) and "↔" in name[4:len(name) - len(s)]:
            return s
    return None


class NetRateTracks:
    """The samples of the connections' byte-rate counter tracks, per track."""

    def __init__(self):
        self.tracks: dict = {}   # (kind, owner, name) -> [ts arrays], [value arrays]
        self.n = 0

    def slices(self, *a, **kw):  # every collector is fed slices; this one reads none
        pass

    slice = group_slices = slices

    def counters(self, name, ts, values, pid=None):
        self._add(("counter", pid, str(name)), ts, values)

    def group_counters(self, group, name, ts, values):
        self._add(("group", str(group), str(name)), ts, values)

    def _add(self, key, ts, values) -> None:
        if self.n > MAX_SAMPLES or is_rate_track(key[2]) is None:
            return
        ts = np.asarray(ts, np.int64)
        self.n += ts.size
        t = self.tracks.setdefault(key, ([], []))
        t[0].append(ts.copy())
        t[1].append(np.asarray(values, np.float64))  # trace_processor reads counter values as doubles

    def rows(self):
        """_tl_nt's rows (in the order the tracks were made), or None past MAX_SAMPLES."""
        if self.n > MAX_SAMPLES:
            return None
        out = []
        for (_, _, name), (tss, vals) in self.tracks.items():
            ts, v = np.concatenate(tss), np.concatenate(vals)
            o = np.argsort(ts, kind="stable")
            ts, v = ts[o], v[o]
            if ts.size == 0:
                continue
            if (ts[1:] == ts[:-1]).any():
                return None  # two samples at one time: lead() pairs them in an order of its own
            span = np.r_[np.diff(ts), LAST_SPAN].astype(np.float64)
            suffix = is_rate_track(name)
            out.append([name, name[4:len(name) - len(suffix)], "sent" if suffix == SUFFIXES[0] else "received",
                        math.fsum((v * span / 1e9).tolist()), int(span[v > 0].sum()), int(ts[0]),
                        int(ts[-1] - ts[0])])
        return out


Collector = NetRateTracks


def part(tracks: NetRateTracks, starts) -> dict | None:
    rows = tracks.rows()
    if rows is None:
        return None
    return {"set": {"version": VERSION, "params": BY_ID[CHECK].defaults(), "rows": rows},
            "chunks": [{} for _ in starts]}


def merge(set_part: dict, chunk_parts: list, params: dict):
    if not made_with(set_part, VERSION, params):
        return None
    sql = render_sql(BY_ID[CHECK], params)
    rest = sql[sql.index(REST):]
    rows = [list(r) for r in set_part["rows"]]
    got = reduce_rows(rest, "_tl_nt", COLUMNS, [tuple(r) for r in rows])
    for way in (-np.inf, np.inf):  # SQLite's sum may differ from the exact one in the last bits
        for r in rows:
            b = r[3]
            for _ in range(ULPS):
                b = float(np.nextafter(b, way))
            r[3] = b
        if reduce_rows(rest, "_tl_nt", COLUMNS, [tuple(r) for r in rows]) != got:
            return None
        rows = [list(r) for r in set_part["rows"]]
    return got
