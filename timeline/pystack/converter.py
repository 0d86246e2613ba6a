"""Converter of the `pystack` family: where in the Python program it happened.

Pass 1 learns the stacks (py_stacks META blocks: frames as the recorder
named them, or as (code object, instruction) with the code objects' line
tables, decoded here) and keeps the records: stacks at CUDA calls (per thread, by
time) and waits.  Pass 2 writes:
- a slice per wait ("wait", category "python") on the thread, its Python
  stack as arg `py`: "train.py:57 step <- train.py:90 main", innermost first;
- the same arg on the CUDA call slices the cuda family writes (syncs, and
  the launches that had theirs taken), joined by thread, function and entry
  time (slice_args, converters/slice_args.py);
- the CPU samples (--py-sample-hz) as timer stack samples (TrackSink.stack_samples:
  Perfetto StreamingProfilePacket runs with interned frames and callstacks:
  per-thread sample tracks, a flame graph for an area); with sampling off, the
  stacks taken at calls and waits instead (PerfSample packets, exact times).
The `py` columns carry the frames of each stack too (Column.stacks): the
Chrome JSON sink points the slices at them (`sf`).
"""
from __future__ import annotations

import binascii
import os

import numpy as np

from ..converters.families import FamilyConverter
from ..converters.interface import Column
from ..python_buckets import LOST, NO_FRAME, UNREADABLE
from . import records as R
from .symbolize import LineTable, decode_tables, line_at

WAIT_NAME, CATEGORY = "wait", "python"
ARG = "py"
ARG_FRAMES = 8          # frames named in the `py` arg; more are "..."
JOIN_SLACK_NS = 500_000  # a stack and the call slice it belongs to start this close (same uprobe hit)
UNKNOWN_STACK = "?"
UNKNOWN_CODE = "<unknown code>"  # a frame naming a code object the log does not hold (damaged input)
TRUNCATED = f"<more than {R.PY_MAX_FRAMES} frames>"
# A sample without a Python stack still took the thread's CPU: it is kept as a
# one-frame stack naming why (bookkeeping names, in <>, no file), so a thread's
# samples add up to the CPU time it used.  Only on threads seen with a Python
# stack: threads with no thread state (C threads: torch's intra-op pool) or
# none that ever held a frame (torch's autograd device threads keep a state
# for life and run C++) get no samples track (docs/python-stacks.md).
# Their names (NO_FRAME, UNREADABLE, LOST) are core's, timeline/python_buckets.py:
# timeline mcp and timeline diff set them apart by name.
BUCKETS = {R.PYF_NO_FRAME: NO_FRAME, R.PYF_FAULT: UNREADABLE}
# A sample whose stack was taken, but whose stack record never reached the log
# (its ring was full at every try until the recording ended): its CPU time was
# spent in Python, where is lost.  Bucketed like the others (LOST), under a key no flag has.
LOST_KEY = -1


class FrameNames:
    """Frames the recorder wrote as (code object, instruction offset): their
    (function, file, line), from the code objects' line tables, decoded in one
    batch per META block."""

    def __init__(self):
        self.codes: dict[int, tuple] = {}        # code id -> (function, file, first line, format, table text)
        self.tables: dict[int, LineTable] = {}   # code id -> its decoded ranges
        self.pending: list[tuple[int, int, int]] = []

    def code(self, cid: int, fn, path, first: int, minor: int, table: str) -> None:
        self.codes[cid] = (str(fn), str(path), first, minor, table)

    def frame(self, idx: int, cid: int, instr: int) -> None:
        self.pending.append((idx, cid, instr))

    def named(self) -> list[tuple[int, tuple[str, str, int]]]:
        todo = {cid for _, cid, _ in self.pending if cid in self.codes and cid not in self.tables}
        for minor in (10, 11):
            cids, raw = [], []
            for cid in sorted(todo):
                if self.codes[cid][3] == minor:
                    try:
                        raw.append(binascii.a2b_base64(self.codes[cid][4]))
                    except (binascii.Error, ValueError):
                        raw.append(b"")  # malformed input: the function's first line
                    cids.append(cid)
            for cid, table in zip(cids, decode_tables(minor, raw, [self.codes[c][2] for c in cids])):
                self.tables[cid] = table
        out = []
        for idx, cid, instr in self.pending:
            code = self.codes.get(cid)
            if code is None:
                out.append((idx, (UNKNOWN_CODE, "", 0)))
            else:
                out.append((idx, (code[0], code[1], line_at(self.tables[cid], instr, code[2]))))
        self.pending = []
        return out


class PyStackConverter(FamilyConverter):
    rings = (R.RING_PYSTACK,)
    metas = ("py_stacks", "py_procs", "py_stats")

    def __init__(self, model):
        super().__init__(model)
        # The raw log is input like any other: anything malformed is skipped, never fatal.
        head = model.header.get("pystack")
        table = head.get("probes") if isinstance(head, dict) else None
        self.probe_names = {int(k): str(v) for k, v in table.items()
                            if str(k).isdigit()} if isinstance(table, dict) else {}
        hz = head.get("sample_hz") if isinstance(head, dict) else None
        self.sample_hz = hz if isinstance(hz, int) else 0
        self.frames: list[tuple[str, str, int]] = []
        self.frame_at: dict[int, int] = {}          # index in the log -> index in self.frames
        self.frame_index: dict[tuple[str, str, int], int] = {}
        self.names = FrameNames()
        self.stacks: dict[tuple[int, int], int] = {}  # (pid, stack id) -> index in self.callstacks
        self.callstacks: list[tuple[int, ...]] = []
        self.texts: dict[int, str] = {}             # callstack index -> `py` arg
        self._calls: list[np.ndarray] = []
        self._trunc_frame: int | None = None
        self._keys: tuple[np.ndarray, np.ndarray] | None = None  # self.stacks as a sorted table
        self._by_key: np.ndarray | None = None
        self._fn_ids = {n: i for i, n in enumerate(sorted(set(self.probe_names.values()))[:255])}  # function -> small id
        self._uses: dict[tuple[int, int], int] | None = {}  # (pid, stack id) -> samples of it, until ranked
        self.buckets: dict[int, int] = {}          # PYF_NO_FRAME / PYF_FAULT -> callstack index of its one frame
        self._bucket_uses: dict[int, int] = {}
        self._py_threads: set[int] = set()          # tgid << 32 | tid of threads seen with a Python stack

    # -- pass 1 ---------------------------------------------------------------
    def scan_meta(self, meta: dict) -> None:
        if meta.get("type") != "py_stacks":
            return
        codes, frames, stacks = meta.get("codes"), meta.get("frames"), meta.get("stacks")
        for item in codes if isinstance(codes, list) else ():
            if (isinstance(item, list) and len(item) == 6 and isinstance(item[0], int) and isinstance(item[3], int)
                    and item[4] in (10, 11) and isinstance(item[5], str)):
                self.names.code(*item)
        for item in frames if isinstance(frames, list) else ():
            if isinstance(item, list) and len(item) == 4 and isinstance(item[0], int):
                idx, fn, path, line = item
                self.frame_at[idx] = self._frame((str(fn), str(path), line if isinstance(line, int) else 0))
            elif isinstance(item, list) and len(item) == 3 and all(isinstance(x, int) for x in item):
                self.names.frame(*item)
        for idx, frame in self.names.named():  # all of this block's new line tables decoded at once
            self.frame_at[idx] = self._frame(frame)
        for item in stacks if isinstance(stacks, list) else ():
            if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], int)):
                continue
            pid, sid, _flags, ids = item
            try:
                key = (pid, int(str(sid), 16))
            except ValueError:
                continue
            if not isinstance(ids, list):
                continue
            frames = tuple(self.frame_at[i] for i in ids if isinstance(i, int) and i in self.frame_at)
            if isinstance(_flags, int) and _flags & R.PYF_TRUNC:  # deeper than the walk goes: say so at the root
                frames += (self._truncated(),)
            self.stacks[key] = len(self.callstacks)
            self.callstacks.append(frames)

    def _frame(self, frame: tuple[str, str, int]) -> int:
        """The index of a (function, file, line) frame, one per distinct frame
        (the recorder's frames are (code object, instruction): several share a line)."""
        idx = self.frame_index.get(frame)
        if idx is None:
            idx = self.frame_index[frame] = len(self.frames)
            self.frames.append(frame)
        return idx

    def _truncated(self) -> int:
        if self._trunc_frame is None:
            self._trunc_frame = self._frame((TRUNCATED, "", 0))
        return self._trunc_frame

    def scan_ring(self, ring: int, recs: np.ndarray) -> None:
        calls = recs[recs["kind"] == R.PY_CALL]
        if calls.size:
            self._calls.append(calls)
        sampled = recs[self._sampled(recs) & (recs["stack_id"] != 0)]
        for p in np.unique(sampled["tgid"]).tolist():
            ids, n = np.unique(sampled["stack_id"][sampled["tgid"] == p], return_counts=True)
            for i, c in zip(ids.tolist(), n.tolist()):
                self._uses[(p, i)] = self._uses.get((p, i), 0) + c
        self._py_threads.update(np.unique(self._thread_keys(recs[recs["stack_id"] != 0])).tolist())
        why = self._why(recs)
        for flag, name in BUCKETS.items():
            n = int(np.count_nonzero(why == flag))
            if n:
                if flag not in self.buckets:
                    self.buckets[flag] = len(self.callstacks)
                    self.callstacks.append((self._frame((name, "", 0)),))
                self._bucket_uses[flag] = self._bucket_uses.get(flag, 0) + n

    @staticmethod
    def _thread_keys(recs: np.ndarray) -> np.ndarray:
        return (recs["tgid"].astype(np.int64) << 32) | recs["tid"].astype(np.int64)

    def _why(self, recs: np.ndarray) -> np.ndarray:
        """Per record, the bucket of a sample taken without a stack: PYF_NO_FRAME
        (the walk found the thread state: never set with NO_STATE) or PYF_FAULT;
        0: none, or a stack."""
        flags = recs["flags"]
        why = np.where((flags & R.PYF_NO_FRAME) != 0, R.PYF_NO_FRAME,
                       np.where((flags & R.PYF_FAULT) != 0, R.PYF_FAULT, 0))
        return np.where(self._sampled(recs) & (recs["stack_id"] == 0), why, 0)

    def _sampled(self, recs: np.ndarray) -> np.ndarray:
        """Which records are samples: CPU samples when the recording took them (an
        area's flame graph is then where the CPU time went), else the stacks at calls and waits."""
        if self.sample_hz:
            return recs["kind"] == R.PY_SAMPLE
        return (recs["kind"] == R.PY_CALL) | (recs["kind"] == R.PY_WAIT)

    # -- stacks ---------------------------------------------------------------
    def _rank_stacks(self) -> None:
        """Renumber the callstacks, most sampled first (pass 1 counted them): the
        trace's callstack ids follow, and most samples get a 1-byte one (a real
        run's start-up, its imports, makes a hundred stacks or more before the
        training loop's first)."""
        lost = sum(n for key, n in self._uses.items() if key not in self.stacks)
        if lost and LOST_KEY not in self.buckets:
            self.buckets[LOST_KEY] = len(self.callstacks)
            self.callstacks.append((self._frame((LOST, "", 0)),))
            self._bucket_uses[LOST_KEY] = lost
        uses = np.zeros(len(self.callstacks), np.int64)
        for key, s in self.stacks.items():
            uses[s] += self._uses.get(key, 0)
        for flag, s in self.buckets.items():
            uses[s] += self._bucket_uses.get(flag, 0)
        order = np.argsort(-uses, kind="stable")  # ties: the log's order
        new = np.empty_like(order)
        new[order] = np.arange(order.size)
        self.callstacks = [self.callstacks[i] for i in order.tolist()]
        self.stacks = {k: int(new[s]) for k, s in self.stacks.items()}
        self.buckets = {f: int(new[s]) for f, s in self.buckets.items()}
        self.texts, self._keys, self._uses = {}, None, None

    def _stack_index(self, pids: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Callstack index per record, -1 where the stack is unknown (none taken, or lost):
        a sorted-table lookup, no Python step per record (samples come by the million)."""
        if self._uses is not None:  # pass 2 has begun: every stack is known
            self._rank_stacks()
        if self._keys is None or self._keys[0].size != len(self.stacks):
            k = np.array(list(self.stacks), dtype=[("pid", "<i8"), ("id", "<u8")]).reshape(-1)
            v = np.fromiter(self.stacks.values(), np.int64, len(self.stacks))
            o = np.argsort(k, order=("pid", "id"))
            self._keys = (k[o], v[o])
        keys, vals = self._keys
        out = np.full(len(ids), -1, np.int64)
        if not keys.size:
            return out
        # per process, a search of plain uint64 ids (numpy searches a structured
        # array with a generic compare: 0.8 s for 1M samples, most of their conversion)
        kpid, kid = np.ascontiguousarray(keys["pid"]), np.ascontiguousarray(keys["id"])
        pids, ids = np.asarray(pids, np.int64), np.asarray(ids, np.uint64)
        for p in np.unique(pids).tolist():
            lo, hi = np.searchsorted(kpid, p, "left"), np.searchsorted(kpid, p, "right")
            if lo == hi:
                continue
            rows = np.flatnonzero(pids == p)
            q = ids[rows]
            pos = np.minimum(np.searchsorted(kid[lo:hi], q), hi - lo - 1)
            hit = kid[lo:hi][pos] == q
            out[rows[hit]] = vals[lo:hi][pos[hit]]
        return out

    def _text(self, s: int) -> str:
        if s < 0:
            return UNKNOWN_STACK
        t = self.texts.get(s)
        if t is None:
            parts = []
            frames = self.callstacks[s]
            for i in frames[:ARG_FRAMES]:
                fn, path, line = self.frames[i]
                parts.append(f"{os.path.basename(path)}:{line} {fn}" if path else fn)
            if len(frames) > ARG_FRAMES:
                parts.append("...")
                if self._trunc_frame is not None and frames[-1] == self._trunc_frame:
                    parts.append(TRUNCATED)
            t = self.texts[s] = " \u2190 ".join(parts) or UNKNOWN_STACK
        return t

    def _arg(self, idx: np.ndarray, stacks: np.ndarray, n: int) -> Column:
        """The `py` column for rows idx of n, from their callstack indices."""
        uniq, inv = np.unique(stacks, return_inverse=True)
        values = np.zeros(n, np.intp)
        values[idx] = inv.ravel()
        present = np.zeros(n, bool)
        present[idx] = True
        ids = uniq.tolist()
        return Column(ARG, "str", values, [self._text(s) for s in ids], present,
                      stacks=[tuple(self.frames[f] for f in self.callstacks[s]) if s >= 0 else () for s in ids])

    # -- pass 2 ---------------------------------------------------------------
    def emit_ring(self, sink, ring: int, recs: np.ndarray) -> None:
        if self._uses is not None:  # pass 2 has begun: number the stacks before any is written
            self._rank_stacks()
        has = recs["stack_id"] != 0
        stacks = np.full(recs.size, -1, np.int64)
        if has.any():
            stacks[has] = self._stack_index(recs["tgid"][has].astype(np.int64), recs["stack_id"][has])
        waits = np.flatnonzero(recs["kind"] == R.PY_WAIT)
        if waits.size:
            w = recs[waits]
            sink.slices(w["ts"], w["dur"], w["tid"], w["tgid"], WAIT_NAME, CATEGORY,
                        [self._arg(np.arange(waits.size), stacks[waits], waits.size)])
        sampled = self._sampled(recs)
        lost = self.buckets.get(LOST_KEY)
        if lost is not None:
            stacks[sampled & has & (stacks < 0)] = lost
        stacks = np.where(sampled, stacks, -1)
        why = self._why(recs)
        if why.any():
            # only on threads seen with a Python stack (pass 1 saw them all): a failed
            # read may have been a C thread's search, and a thread that never held a
            # frame ran no Python code of the user's: no samples track for either
            seen = np.fromiter(self._py_threads, np.int64, len(self._py_threads))
            why[~np.isin(self._thread_keys(recs), seen)] = 0
            for flag, s in self.buckets.items():
                stacks[why == flag] = s
        known = np.flatnonzero(stacks >= 0)
        if known.size and self.callstacks:
            # field by field: no copy of the 40-byte records
            sink.stack_samples(recs["ts"][known], recs["tid"][known], recs["tgid"][known], stacks[known],
                               self.callstacks, self.frames, label=self._text, timer=bool(self.sample_hz))

    def slice_args(self, ts, dur, tid, name) -> list:
        """`py` on the CUDA call slices whose stack was taken at their entry:
        each stack goes to the slice of the same thread and function whose
        entry is nearest the time the stack was taken ([ts, ts + dur] of the
        record: the two programs of the one uprobe hit run in either order;
        PYF_HOOKED: the cuda program ran first, so only a slice starting
        before the stack), within JOIN_SLACK_NS; a slice gets at most one stack.  From the
        stack's side, not the slice's: with one launch in N taken, the
        launches between have none."""
        calls = self._call_index()
        if calls is None:
            return []
        if isinstance(name, str):
            fn = np.full(len(ts), self._fn_ids.get(name, -1), np.int64)
        else:
            fn = np.array([self._fn_ids.get(s, -1) for s in name.strings], np.int64)[np.asarray(name.values)]
        rows = np.flatnonzero(fn >= 0)
        if not rows.size:
            return []
        t = np.asarray(ts, np.int64)[rows]
        keys = (np.asarray(tid, np.int64)[rows] << 8) | fn[rows]
        order = np.lexsort((t, keys))
        rows, t, keys = rows[order], t[order], keys[order]
        calls = calls[(calls["stack"] >= 0) & np.isin(calls["key"], keys)]
        if not calls.size:
            return []
        # (key, time) pairs as one sortable int: times ranked among the rows' and the calls'
        ranks = np.unique(np.concatenate([t, calls["ts"]]), return_inverse=True)[1].ravel()
        r_code = (keys << 32) | ranks[:t.size]
        pos = np.searchsorted(r_code, (calls["key"] << 32) | ranks[t.size:])  # first row at or after the stack
        best = np.full(calls.size, -1, np.int64)
        best_dt = np.full(calls.size, JOIN_SLACK_NS + 1, np.int64)
        for cand in (pos - 1, pos):
            ok = (cand >= 0) & (cand < rows.size)
            c = np.clip(cand, 0, rows.size - 1)
            dt = np.maximum(calls["ts"] - t[c], 0) + np.maximum(t[c] - calls["ts"] - calls["dur"], 0)
            better = ok & (keys[c] == calls["key"]) & (dt < best_dt) & ~(calls["hooked"] & (t[c] > calls["ts"]))
            best[better], best_dt[better] = c[better], dt[better]
        hit = np.flatnonzero(best >= 0)
        if not hit.size:
            return []
        o = hit[np.lexsort((best_dt[hit], best[hit]))]  # per slice, its nearest stack first
        o = o[np.unique(best[o], return_index=True)[1]]
        return [self._arg(rows[best[o]], calls["stack"][o], len(ts))]

    def _call_index(self) -> np.ndarray | None:
        """The stacks taken at calls, sorted by (thread, function, time): key
        (tid << 8 | function), ts, dur (time taking it; 0 in older logs),
        callstack index, hooked (PYF_HOOKED); None when there are none."""
        if self._by_key is None and self._calls:
            c = np.concatenate(self._calls)
            fn = np.array([self._fn_ids.get(self.probe_names.get(int(k), ""), -1) for k in c["cookie"].tolist()],
                          np.int64)
            c, fn = c[fn >= 0], fn[fn >= 0]
            rows = np.zeros(c.size, [("key", "<i8"), ("ts", "<i8"), ("dur", "<i8"), ("stack", "<i8"),
                                     ("hooked", "?")])
            rows["key"] = (c["tid"].astype(np.int64) << 8) | fn
            rows["ts"] = c["ts"]
            rows["dur"] = np.minimum(c["dur"], JOIN_SLACK_NS)
            rows["hooked"] = (c["flags"] & R.PYF_HOOKED) != 0
            rows["stack"] = self._stack_index(c["tgid"].astype(np.int64), c["stack_id"])
            self._by_key = rows[np.lexsort((rows["ts"], rows["key"]))] if rows.size else None
            self._calls = []
        return self._by_key
