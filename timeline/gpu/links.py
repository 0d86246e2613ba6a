"""The gpu family's side of the call -> GPU work flows (timeline/converters/call_links.py), made
ahead of pass 2 in windows of time (issue 23: nothing here grows with the recording).

Each work record (kernel, copy, memset) is tied to its API record by process and correlation id; of
several API records with one id (a runtime call and the driver call it makes) the runtime one, else
the earliest.  The flow into the work is FLOW_BASE + its record number; call_links is asked for its
source: the CPU call containing the API record.  An id is settled once its first API record started
before the window's cut (its work runs after the call and comes within the window); a work record
read before the cut whose id has no API record held is settled without a flow.  Past the window's
end both are let go, and counted: `late` work records (no API record in time: no flow into them),
`idle` API records of calls that cause work (not synchronisations) that got none.
"""
from __future__ import annotations

import numpy as np

from ..converters.call_links import _joined
from . import records as R

# flow ids of this family: FLOW_BASE + the record's number in the log (below 2**53: JSON readers
# parse numbers as doubles)
FLOW_BASE = 0x6770 << 32
WORK = (R.KERNEL, R.MEMCPY, R.MEMSET)
API = np.dtype([("pid", "<i8"), ("tid", "<i8"), ("start", "<i8"), ("end", "<i8"), ("corr", "<u4"),
                ("flags", "<u2"), ("cbid", "<u4"), ("ret", "<u4")])


def _key(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    return (pid.astype(np.uint64) << np.uint64(32)) | corr.astype(np.uint64)


def _member(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """keys found in sorted_keys (searchsorted: the big side is not sorted again)."""
    if not sorted_keys.size:
        return np.zeros(keys.size, bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.size - 1)
    return sorted_keys[pos] == keys


class WorkLinks:
    def __init__(self, links, causes_work):
        """links: the model's CallLinks; causes_work(flags, cbid) -> bool per API record: its call
        causes GPU work (what `idle` counts)."""
        self.links = links
        self.causes_work = causes_work
        self.n = 0                                          # ring-7 records read ahead
        self._api: list[tuple[np.ndarray, ...]] = []        # API records not settled, column by column
        self._work: list[tuple[np.ndarray, ...]] = []       # (key, number, clock when read) of work not settled
        self._flowing = np.zeros(0, np.int64)               # numbers of settled work a flow ends on, not taken
        self._round: tuple | None = None                    # this round's wants: (API row, flow), the API rows
        self.slices: list[tuple[dict, np.ndarray]] = []     # API records no offered call contains, flows out
        self.late = 0
        self.idle = 0
        links.follow(R.RING_GPU, self.read)
        links.register(self.wants, self.unmatched)

    def read(self, recs: np.ndarray) -> None:
        """A ring-7 block read ahead of pass 2."""
        idx = np.arange(self.n, self.n + recs.size, dtype=np.int64)
        self.n += recs.size
        kind = recs["kind"]
        api = recs[kind == R.API]
        if api.size:
            start = api["start"].astype(np.int64)
            end = np.maximum(api["end"].astype(np.int64), start)
            self._api.append(tuple(c.astype(API[f]) for f, c in zip(API.names, (
                api["pid"], api["tid"], start, end, api["correlation"], api["flags"], api["domain"], api["value"]))))
            self.links.tick(int(end.max()))
        work = np.isin(kind, WORK) & (recs["correlation"] != 0)
        if work.any():
            if self.links.clock is None:  # no CPU time read yet
                self.links.tick(int(recs["start"][work].astype(np.int64).min()))
            self._work.append((_key(recs["pid"][work], recs["correlation"][work]), idx[work],
                               np.full(int(work.sum()), self.links.clock, np.int64)))

    def floor(self) -> int:
        """Work records below this number are settled."""
        return min([int(w[1][0]) for w in self._work] + [self.n])

    def take(self, lo: int, hi: int) -> np.ndarray:
        """Per record lo..hi-1 (settled; asked in order): a flow ends on it."""
        out = np.zeros(hi - lo, bool)
        now = self._flowing < hi
        out[self._flowing[now] - lo] = True
        self._flowing = self._flowing[~now]
        return out

    # -- a round of call_links (cut None: the log has ended)
    def wants(self, cut: int | None):
        self._round = None
        api = _joined(self._api)
        chosen = None
        if api:
            key = _key(api[0], api[4])
            if cut is None:
                settle = np.ones(key.size, bool)
            else:  # every record of an id whose first one started before the cut
                settle = _member(key, np.sort(key[api[2] < cut]))
                if not settle.all():
                    self._api = [tuple(c[~settle] for c in api)]
            a = [c[settle] for c in api]
            pid, corr, start, flags = a[0], a[4], a[2], a[5]
            order = np.lexsort((start, (flags & R.GF_DRIVER) != 0, corr, pid))
            k = key[settle][order]
            first = np.ones(k.size, bool)
            first[1:] = k[1:] != k[:-1]
            first &= corr[order] != 0
            rows = order[first]
            chosen = (k[first], [c[rows] for c in a])  # one per id, in id order
        works = _joined(self._work)
        if not works:
            return self._idle(chosen, np.zeros(0, np.intp), cut)
        wk, wi, stamp = works
        hit = _member(wk, chosen[0]) if chosen is not None else np.zeros(wk.size, bool)
        # not settled: no API record yet, read within the window, or its id's records still held
        wait = ~hit
        if cut is not None:
            old = np.flatnonzero(wait & (stamp < cut))
            if old.size and self._api:  # (rare: its API record came after it, near the cut)
                held = np.sort(_key(self._api[0][0], self._api[0][4]))
                old = old[~_member(wk[old], held)]
            wait[old] = False
            self.late += int(old.size)
        if wait.any():
            self._work = [(wk[wait], wi[wait], stamp[wait])]
        if chosen is None or not hit.any():
            return self._idle(chosen, np.zeros(0, np.intp), cut)
        j = np.searchsorted(chosen[0], wk[hit])  # each want's API record
        wi = wi[hit]
        self._flowing = np.concatenate([self._flowing, wi])
        flow = FLOW_BASE + wi.astype(np.uint64)
        cols = chosen[1]
        self._round = (j, flow, cols)
        self._idle(chosen, j, cut)
        return cols[0][j], cols[1][j], cols[2][j], cols[3][j], flow

    def _idle(self, chosen, used: np.ndarray, cut):
        if chosen is not None and cut is not None:
            none = np.ones(chosen[0].size, bool)
            none[used] = False
            cols = chosen[1]
            self.idle += int(self.causes_work(cols[5][none], cols[6][none]).sum())
        return None

    def unmatched(self, mask: np.ndarray) -> None:
        """The wants of this round no offered call contains: per API record, its flows out."""
        if self._round is None or not mask.any():
            return
        j, flow, cols = self._round
        wants = np.flatnonzero(mask)
        rows, flows = j[wants], flow[wants]
        o = np.argsort(rows, kind="stable")
        rows, flows = rows[o], flows[o]
        u, start, cnt = np.unique(rows, return_index=True, return_counts=True)
        fo = np.zeros((u.size, int(cnt.max())), np.uint64)
        for i in range(fo.shape[1]):
            m = cnt > i
            fo[m, i] = flows[start[m] + i]
        self.slices.append(({f: c[u] for f, c in zip(API.names, cols)}, fo))
