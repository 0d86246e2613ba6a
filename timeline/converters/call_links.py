"""Flows from CPU call slices one family writes to slices another family writes.

The cuda family writes a slice per CUDA call on the calling thread; the gpu
family knows, from CUPTI's API records, which call (thread, start, end)
caused each kernel or copy, but not which slice that is.  Neither imports
the other; they meet here, through the model (`LogModel.call_links`).

The link is made in pass 2, in windows of time, so that what it holds does
not grow with the recording (issue 23): a call, its API record and its GPU
work lie close together in the log (the work's record comes once it ran and
CUPTI flushed its buffer).  A reader of its own runs ahead of pass 2 over the
rings that `follow` names, and:

- the writer of call slices `offer`s them (thread, process, start,
  duration), numbered in the order it will write them; in pass 1 it names its
  `threads` (a CUPTI thread id the writer never knew is matched otherwise);
- the asker `register`s wants_fn(cut) -> (pid, tid, t0, t1, flow) arrays,
  "a flow F from the call on thread tid (of process pid) that contains
  [t0, t1]", for what it holds that can no longer change (what started
  before `cut`; cut None: the log has ended), and unmatched_fn(mask): the
  wants of that round no offered call contains (it writes those calls
  itself);
- the writer asks `flows(seq)` for the flow ids leaving its rows; the asker
  `advance`s until what it writes next is settled.

Time in the window is the latest CPU time read ahead (`tick`): what started
WINDOW_NS before it is settled.  A call ends its time in the window once
nothing that could still come can fall inside it; a partner that comes later
than the window is not linked (the asker counts those).  A log shorter than
the window is linked at its end, in one round, as a whole.

Matching: on the thread, the outermost call containing [t0, t1] (the call the
program made: cudaLaunchKernel rather than the cuLaunchKernel it makes
inside; ncclAllReduce rather than its launches); when none contains it, the
last top-level call inside [t0, t1] (the API record is of a runtime call the
family did not probe, such as the CUDA runtime linked into cuBLAS and cuDNN,
and the call inside is the driver call it made: cuLaunchKernel).  A call recorded with no
duration (the cuda family's entry-only mode) matches when it starts at most
ENTRY_SLACK_NS before t0.  A tid the log does not know as a thread of pid
(CUPTI's own thread ids are not always the kernel's) is matched against all
the process's calls: the innermost one containing [t0, t1].
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

ENTRY_SLACK_NS = 20_000
WINDOW_NS = 20_000_000_000  # how late a partner may come: 100 of CUPTI's 200 ms flushes, and a kernel queued or running that long (a collective waiting for a slow rank)
STEP_NS = WINDOW_NS // 4   # a round of matching each time the window moves this far


class CallLinks:
    def __init__(self):
        self.read_ahead: Callable[[set], Iterator] | None = None  # rings -> (ring, recs) of each block
        self._threads: set[int] = set()        # pass 1: pid << 32 | tid of every offered call
        self._known = np.zeros(0, np.int64)
        self._followers: dict[int, Callable] = {}
        self._resolvers: list[tuple[Callable, Callable]] = []
        self._blocks: Iterator | None = None
        self._done = False
        self.clock: int | None = None           # the latest CPU time read ahead
        self._cut: int | None = None            # the last round's cut
        self._seq = 0
        self._calls: list[tuple[np.ndarray, ...]] = []  # (seq, tid, pid, ts, end) not settled
        self._res_seq = np.zeros(0, np.int64)   # matched wants of calls not written yet: the call
        self._res_flow = np.zeros(0, np.uint64)

    # -- pass 1
    def threads(self, tid, pid) -> None:
        """Threads the writer will offer calls of (pass 1)."""
        key = (np.asarray(pid, np.int64) << 32) | (np.asarray(tid, np.int64) & 0xFFFFFFFF)
        self._threads.update(np.unique(key).tolist())

    def follow(self, ring: int, fn) -> None:
        """fn(recs) for each block of `ring`, read ahead of pass 2."""
        self._followers[ring] = fn

    def register(self, wants_fn, unmatched_fn) -> None:
        self._resolvers.append((wants_fn, unmatched_fn))

    # -- read ahead (pass 2)
    def offer(self, tid, pid, ts, dur) -> None:
        """The next len(ts) slices the writer will write."""
        n = len(ts)
        if not n:
            return
        seq = np.arange(self._seq, self._seq + n, dtype=np.int64)
        self._seq += n
        ts = np.asarray(ts, np.int64)
        self._calls.append((seq, np.asarray(tid, np.int64), np.asarray(pid, np.int64), ts,
                            ts + np.maximum(np.asarray(dur, np.int64), 0)))
        self.tick(int(ts.max()))

    def tick(self, t: int) -> None:
        self.clock = t if self.clock is None else max(self.clock, t)

    def advance(self, settled: Callable[[], bool]) -> None:
        """Read ahead until settled() or the log's end."""
        if self._done or settled():
            return
        if not self._resolvers or self.read_ahead is None:
            self._done = True
            return
        if self._blocks is None:
            self._known = np.array(sorted(self._threads), np.int64)
            self._blocks = self.read_ahead(set(self._followers))
        for ring, recs in self._blocks:
            self._followers[ring](recs)
            if self.clock is None:
                continue
            if self._cut is None:
                self._cut = self.clock - WINDOW_NS
            if self.clock - WINDOW_NS - self._cut >= STEP_NS:
                self._round(self.clock - WINDOW_NS)
                if settled():
                    return
        self._round(None)
        self._done = True

    # -- pass 2
    def flows(self, seq) -> np.ndarray | None:
        """Flow ids leaving the offered calls `seq` (the next rows the writer writes, in increasing
        order from one question to the next): (n, k) uint64, 0 = none; None when no row has one."""
        seq = np.asarray(seq, np.int64)
        if not seq.size:
            return None
        last = int(seq.max())
        self.advance(lambda: self._floor() > last)
        now = self._res_seq <= last
        got_seq, got_flow = self._res_seq[now], self._res_flow[now]
        self._res_seq, self._res_flow = self._res_seq[~now], self._res_flow[~now]
        if not got_seq.size:
            return None
        o = np.lexsort((got_flow, got_seq))
        got_seq, got_flow = got_seq[o], got_flow[o]
        lo = np.searchsorted(got_seq, seq, "left")
        cnt = np.searchsorted(got_seq, seq, "right") - lo
        k = int(cnt.max())
        if not k:
            return None
        out = np.zeros((seq.size, k), np.uint64)
        for j in range(k):
            m = cnt > j
            out[m, j] = got_flow[lo[m] + j]
        return out

    def _floor(self) -> int:
        """Offered calls below this number are settled."""
        return min([int(c[0][0]) for c in self._calls if c[0].size] + [self._seq]) if not self._done else 1 << 62

    # -- matching
    def _round(self, cut: int | None) -> None:
        """Match what the askers settle before `cut` (None: everything) against the calls held;
        let go of the calls nothing that can still come falls in."""
        if cut is not None:
            self._cut = cut
        calls = _joined(self._calls)
        for wants_fn, unmatched_fn in self._resolvers:
            wants = wants_fn(cut)
            if wants is None or not wants[0].size:
                continue
            pid, tid, t0, t1, flow = (np.asarray(a, dt) for a, dt in
                                      zip(wants, (np.int64, np.int64, np.int64, np.int64, np.uint64)))
            got = np.full(pid.size, -1, np.int64)  # seq of the matched call
            if calls:
                cseq, ctid, cpid, cts, cend = calls
                if cut is not None:  # the calls that can hold these wants or lie inside them (not those started after them)
                    early = cts <= t1.max()
                    cseq, ctid, cpid, cts, cend = (c[early] for c in calls)
                known = np.isin((pid << 32) | (tid & 0xFFFFFFFF), self._known)
                self._match(got, known, tid, t0, t1, ctid, cseq, cts, cend, outermost=True)
                self._match(got, ~known, pid, t0, t1, cpid, cseq, cts, cend, outermost=False)
            ok = got >= 0
            self._res_seq = np.concatenate([self._res_seq, got[ok]])
            self._res_flow = np.concatenate([self._res_flow, flow[ok]])
            unmatched_fn(~ok)
        if calls and cut is not None:
            keep = calls[4] + ENTRY_SLACK_NS >= cut  # a want yet to come may start in it
            self._calls = [tuple(c[keep] for c in calls)] if keep.any() else []
        elif calls:
            self._calls = []

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
                root = np.maximum.accumulate(np.where(top, np.arange(ts.size), 0))
                pick = np.where(has & (end[root[i]] >= t1[w]), root[i], pick)
            entry_only = has & (pick < 0) & (end[i] == ts[i]) & (t0[w] - ts[i] <= ENTRY_SLACK_NS)
            pick = np.where(entry_only, i, pick)
            if outermost:
                # no call contains it: a call inside it, made by a runtime the family did not probe
                # (the CUDA runtime linked into cuBLAS/cuDNN calls cuLaunchKernel), the last one
                j = np.searchsorted(ts, t1[w], "right") - 1
                r = root[np.maximum(j, 0)]
                inside = (pick < 0) & (j >= 0) & (ts[r] >= t0[w]) & (end[r] <= t1[w])
                pick = np.where(inside, r, pick)
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
