"""Flows from CPU call slices one family writes to slices another family writes.

The cuda family writes a slice per CUDA call on the calling thread; the gpu
family knows, from CUPTI's API records, which call (thread, start, end)
caused each kernel or copy, but not which slice that is.  Neither imports
the other; they meet here, through the model (`LogModel.call_links`):

- pass 1: the writer of call slices `offer`s them (thread, process, start,
  duration), numbered in the order it will write them; the asker registers
  `on_resolve(fn)`, where fn `want`s a flow per caused slice: "from the call
  on thread tid (of process pid) that contains [t0, t1], flow id F";
- pass 2: the first question resolves every want at once (vectorised): the
  writer asks `flows(seq)` for the flow ids leaving each of its rows, the
  asker `unmatched()` for the wants no offered call contains (it writes
  those calls itself).

Matching: on the thread, the outermost call containing [t0, t1] (the call the
program made: cudaLaunchKernel rather than the cuLaunchKernel it makes
inside; ncclAllReduce rather than its launches).  A call recorded with no
duration (the cuda family's entry-only mode) matches when it starts at most
ENTRY_SLACK_NS before t0.  A tid the log does not know as a thread of pid
(CUPTI's own thread ids are not always the kernel's) is matched against all
the process's calls: the innermost one containing [t0, t1].
"""
from __future__ import annotations

import numpy as np

ENTRY_SLACK_NS = 20_000


class CallLinks:
    def __init__(self):
        self._calls: list[tuple[np.ndarray, ...]] = []  # (seq, tid, pid, ts, end)
        self._seq = 0
        self._wants: list[tuple[np.ndarray, ...]] = []  # (pid, tid, t0, t1, flow)
        self._resolvers: list = []
        self._resolved = False
        self._flow_seq = np.zeros(0, np.int64)     # offered call of each matched want, sorted
        self._flow_ids = np.zeros(0, np.uint64)
        self._unmatched = np.zeros(0, bool)

    # -- pass 1
    def offer(self, tid, pid, ts, dur, ok=None) -> None:
        """The next len(ts) slices the writer will write (ok: those that can be a flow's source)."""
        n = len(ts)
        seq = np.arange(self._seq, self._seq + n, dtype=np.int64)
        self._seq += n
        sel = slice(None) if ok is None else np.asarray(ok, bool)
        ts = np.asarray(ts, np.int64)[sel]
        self._calls.append((seq[sel], np.asarray(tid, np.int64)[sel], np.asarray(pid, np.int64)[sel], ts,
                            ts + np.maximum(np.asarray(dur, np.int64)[sel], 0)))

    def on_resolve(self, fn) -> None:
        """fn() is called once, before the first question of pass 2: it makes its `want`s then."""
        self._resolvers.append(fn)

    def want(self, pid, tid, t0, t1, flow) -> None:
        """A flow (ids `flow`, uint64, non-zero) from the call containing [t0, t1] on each tid."""
        # contiguous: a field of a caller's record array (a strided view) would keep all of it alive
        self._wants.append(tuple(np.ascontiguousarray(a, dt) for a, dt in
                                 ((pid, np.int64), (tid, np.int64), (t0, np.int64), (t1, np.int64), (flow, np.uint64))))

    # -- pass 2
    def flows(self, seq) -> np.ndarray | None:
        """Flow ids leaving the offered calls `seq`: (n, k) uint64, 0 = none; None when no row has one."""
        self._resolve()
        seq = np.asarray(seq, np.int64)
        if not self._flow_seq.size or not seq.size:
            return None
        lo = np.searchsorted(self._flow_seq, seq, "left")
        cnt = np.searchsorted(self._flow_seq, seq, "right") - lo
        k = int(cnt.max())
        if not k:
            return None
        out = np.zeros((seq.size, k), np.uint64)
        for j in range(k):
            m = cnt > j
            out[m, j] = self._flow_ids[lo[m] + j]
        return out

    def unmatched(self) -> np.ndarray:
        """Per want, in the order they were made: no offered call contains it."""
        self._resolve()
        return self._unmatched

    # -- matching
    def _resolve(self) -> None:
        if self._resolved:
            return
        self._resolved = True
        for fn in self._resolvers:
            fn()
        # what was offered and wanted is only needed here (a few tens of bytes per call): let it go
        wants, calls, self._wants, self._calls = self._wants, self._calls, [], []
        if not wants:
            return
        pid, tid, t0, t1, flow = _joined(wants)
        n = pid.size
        got = np.full(n, -1, np.int64)  # seq of the matched call
        if calls:
            cseq, ctid, cpid, cts, cend = _joined(calls)
            # a tid the writer knows as a thread of this process (pid, tid < 2**32)
            known = np.isin((pid << 32) | (tid & 0xFFFFFFFF), np.unique((cpid << 32) | (ctid & 0xFFFFFFFF)))
            self._match(got, known, tid, t0, t1, ctid, cseq, cts, cend, outermost=True)
            self._match(got, ~known, pid, t0, t1, cpid, cseq, cts, cend, outermost=False)
        ok = got >= 0
        self._unmatched = ~ok
        o = np.argsort(got[ok], kind="stable")
        self._flow_seq, self._flow_ids = got[ok][o], flow[ok][o]

    @staticmethod
    def _match(got, rows, key, t0, t1, ckey, cseq, cts, cend, outermost: bool) -> None:
        """For want rows `rows`: the call among those with the same key (thread or process)."""
        for k in np.unique(key[rows]).tolist():
            w = np.flatnonzero(rows & (key == k))
            c = np.flatnonzero(ckey == k)
            if not c.size:
                continue
            c = c[np.argsort(cts[c], kind="stable")]
            ts, end, seq = cts[c], cend[c], cseq[c]
            i = np.searchsorted(ts, t0[w], "right") - 1  # the latest call starting at or before t0
            has = i >= 0
            i = np.maximum(i, 0)
            pick = np.where(has & (end[i] >= t1[w]), i, -1)
            if outermost:
                # each call's top-level ancestor: the last call starting after everything before it ended
                reach = np.maximum.accumulate(end)
                top = np.ones(ts.size, bool)
                top[1:] = ts[1:] >= reach[:-1]
                root = np.maximum.accumulate(np.where(top, np.arange(ts.size), 0))[i]
                pick = np.where(has & (end[root] >= t1[w]), root, pick)
            entry_only = has & (pick < 0) & (end[i] == ts[i]) & (t0[w] - ts[i] <= ENTRY_SLACK_NS)
            pick = np.where(entry_only, i, pick)
            got[w] = np.where(pick >= 0, seq[np.maximum(pick, 0)], -1)


def _joined(parts: list[tuple[np.ndarray, ...]]) -> list[np.ndarray]:
    """Column by column, the parts' arrays end to end; `parts` is emptied and each column's pieces
    are let go once joined (at most one column is held twice)."""
    columns = [list(c) for c in zip(*parts)]
    parts.clear()
    out = []
    for pieces in columns:
        out.append(pieces[0] if len(pieces) == 1 else np.concatenate(pieces))
        pieces.clear()
    return out
