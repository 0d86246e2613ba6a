"""Flows whose two ends land in different chunks of a trace set.

trace_processor drops a flow with one end, so a launch -> kernel flow cut by
a chunk boundary would vanish from both chunks.  `FlowEnds` records where each
flow end went (chunk, and the track it is on) and pairs them up; at the end
each crossing flow gets a marker slice (zero duration) at the edge of each
chunk, on the track of the end that chunk lacks, linked to the end it has:

    chunk 2:  launch ──flow──▶ "→ flow to chunk-0003"      (on the GPU stream, at chunk 2's last ns)
    chunk 3:  "← flow from chunk-0002" (on the launching thread, at chunk 3's start) ──flow──▶ kernel

Both markers carry the flow id (`timeline_flow_id`, the id it has in both
chunks) and the other chunk's file (`timeline_flow_chunk`).

Memory: ends are kept in numpy arrays (25 bytes each) only until their
partner arrives; pairs are matched in bulk whenever the pending ends double,
so only flows whose other end is not written yet are held (families write
both ends of most flows within the same batch).
"""
from __future__ import annotations

import numpy as np

from .interface import Column, flow_columns

OUT, IN = 0, 1
END = np.dtype([("id", "<u8"), ("kind", "u1"), ("chunk", "<i4"), ("tid", "<i4"), ("pid", "<i4"),
                ("track", "<i4")])  # track: index into FlowEnds.tracks, -1 = thread tid of process pid
NO_PID = -1
MARKER_CAT = "timeline"


class FlowEnds:
    def __init__(self, compact_above: int = 1 << 18):
        self._parts: list[np.ndarray] = []
        self._pending = 0
        self._floor = compact_above
        self._limit = compact_above
        self.tracks: list[tuple] = []       # (group, track, lane) of group-track ends
        self._track_ix: dict[tuple, int] = {}
        self._crossing: list[tuple[np.ndarray, np.ndarray]] = []  # (out ends, in ends) in different chunks

    def group_track(self, group: str, track: str, lane: int) -> int:
        key = (group, track, lane)
        ix = self._track_ix.get(key)
        if ix is None:
            ix = self._track_ix[key] = len(self.tracks)
            self.tracks.append(key)
        return ix

    def add(self, ids, kind: int, chunk, tid=None, pid=None, track: int = -1) -> None:
        """Flow ends of rows (ids: (n,) or (n, k), 0 = none) in chunks `chunk` ((n,) or one int), on
        thread tracks (tid, pid: (n,) arrays or ints; pid None: the thread's process) or group track
        `track`."""
        if ids is None:
            return
        cols = flow_columns(ids)
        n = cols[0].size
        for col in cols:
            rows = np.flatnonzero(col)
            if not rows.size:
                continue
            e = np.empty(rows.size, END)
            e["id"], e["kind"], e["track"] = col[rows], kind, track
            e["chunk"] = np.broadcast_to(np.asarray(chunk), n)[rows]
            e["tid"] = -1 if tid is None else np.broadcast_to(np.asarray(tid), n)[rows]
            e["pid"] = NO_PID if pid is None else np.broadcast_to(np.asarray(pid), n)[rows]
            self._parts.append(e)
            self._pending += rows.size
        if self._pending > self._limit:
            self._match()

    def _match(self) -> None:
        """Pair each flow's out end with its in end; keep crossing pairs, hold the unpaired."""
        if not self._parts:
            return
        a = np.concatenate(self._parts) if len(self._parts) > 1 else self._parts[0]
        a = a[np.lexsort((a["kind"], a["id"]))]
        # sorted by (id, kind): an id's out end is followed by its in end (one such step per id)
        i = np.flatnonzero((a["id"][1:] == a["id"][:-1]) & (a["kind"][:-1] == OUT) & (a["kind"][1:] == IN))
        cross = i[a["chunk"][i] != a["chunk"][i + 1]]
        if cross.size:
            self._crossing.append((a[cross], a[cross + 1]))
        paired = np.zeros(a.size, bool)
        paired[i] = paired[i + 1] = True
        rest = a[~paired]
        self._parts = [rest] if rest.size else []
        self._pending = rest.size
        self._limit = max(self._floor, 2 * rest.size)

    def crossing(self) -> tuple[np.ndarray, np.ndarray]:
        """All pairs so far whose ends are in different chunks: (out ends, in ends)."""
        self._match()
        if not self._crossing:
            return np.zeros(0, END), np.zeros(0, END)
        return (np.concatenate([o for o, _ in self._crossing]), np.concatenate([i for _, i in self._crossing]))


def write_markers(flows: FlowEnds, sinks: list, starts: np.ndarray, names: list[str], lifetime) -> list[int]:
    """The edge markers of each crossing flow into the chunks' sinks; returns the markers per chunk.
    names: each chunk's file name; lifetime(kind, id) -> (start, end) of a thread (None: unknown)."""
    outs, ins = flows.crossing()
    added = [0] * len(sinks)
    for o, i in zip(outs.tolist(), ins.tolist()):
        # o, i: (id, kind, chunk, tid, pid, track)
        fid = int(o[0])
        for here, other, has_in in ((o, i, False), (i, o, True)):
            c, oc = here[2], other[2]
            ts = int(starts[c + 1]) - 1 if oc > c else int(starts[c])
            arrow = "\u2192" if oc > c else "\u2190"
            name = f"{arrow} flow {'from' if has_in else 'to'} {names[oc]}"
            # on the track of the end this chunk lacks, if it can be there (a thread alive then)
            where = other if _can_hold(other, ts, lifetime) else here
            link = dict(flow_out=fid) if has_in else dict(flow_in=fid)
            _marker(sinks[c], flows, where, ts, name, fid, names[oc], link)
            added[c] += 1
    return added


def _can_hold(end, ts: int, lifetime) -> bool:
    if end[5] >= 0:
        return True
    start, stop = lifetime("thread", int(end[3]))
    return (start is None or start <= ts) and (stop is None or stop > ts)


def _marker(sink, flows: FlowEnds, end, ts: int, name: str, fid: int, chunk_file: str, link: dict) -> None:
    args = {"timeline_flow_id": fid, "timeline_flow_chunk": chunk_file}
    if end[5] < 0:
        pid = None if end[4] == NO_PID else int(end[4])
        sink.slice(ts, 0, int(end[3]), pid, name, MARKER_CAT, args, **link)
        return
    group, track, lane = flows.tracks[end[5]]
    cols = [Column("timeline_flow_id", "int", np.array([fid], np.uint64)),
            Column("timeline_flow_chunk", "str", np.zeros(1, np.intp), [chunk_file])]
    ids = {k: np.array([v], np.uint64) for k, v in link.items()}
    sink.group_slices(group, track, np.array([ts], np.int64), np.zeros(1, np.int64), name, MARKER_CAT, cols,
                      lane=lane, **ids)
