"""python_hotspots (sql/python_hotspots.sql) as a partial computed at conversion.

Its inputs: the pystack family's samples (`stack_samples`: Perfetto's cpu_profile_stack_sample for
timer samples, perf_sample for the stacks at calls and waits), the main thread and the steady state
(_sched.py's tl_main_thread and tl_steady). Both picks are known only at the end of the conversion, so
the collector holds each sample's trace time, thread and callstack index (16 bytes a sample; above
MAX_SAMPLES no partial) and works it all out at the end, per distinct callstack: each frame named
"function (file:line)" as the sink names it and cut into fn/file/line by the SQL's own string rules;
self from the leaf, total once per sample for every distinct (fn, file) on the stack, the hottest line
from the leaves. The set part holds the thread's sample count, the top MAX_FUNCS functions by self
(fn, file, self, total, hottest line, whether that line ties another) and the no-stack buckets; each
chunk's part is empty. Bounded: MAX_FUNCS + 3 short rows.

A timer sample's time is what trace_processor makes of the StreamingProfilePacket: microseconds of
CLOCK_MONOTONIC (floored), turned back into BOOTTIME with the header's offset.

No partial (the SQL runs) without any stack sample (the SQL says "not recorded"), where the main
thread or steady state is not certain (_sched.py), more than
MAX_SAMPLES samples, the end clock snapshot moves MONOTONIC against BOOTTIME (trace_processor would
convert some timer samples with another offset), a sample of the main thread with an empty stack, a
frame name the SQL's parsing does not cut into a plain line number, or one trace_processor would
demangle (_Z...). merge declines where the SQL's answer hangs on its row order: two listed functions
(or the last listed and the next) with the same self count, a listed function whose hottest line ties
another; and for a `top` the SQL would not take as it is (not a whole number >= 1).
"""
from __future__ import annotations

import re

import numpy as np

from ...converters.interface import frame_name
from ...python_buckets import LOST, NO_FRAME, UNREADABLE
from ._gpu import _fixed, _round
from ._sched import SchedColumns

CHECK = "python_hotspots"
VERSION = 1
MAX_SAMPLES = 4_000_000      # samples held until the end (16 bytes each: 64 MiB at most)
MAX_FUNCS = 1_000            # functions listed in the set part, by self
MAX_THREAD_SEQUENCES = 60_000  # perfetto/stacks.py: above, timer samples go out as PerfSample (exact ns)
BUCKET_TEXT = {NO_FRAME: "no Python frame (interpreter start-up or shutdown, or C code entered without one)",
               LOST: "a Python stack whose record was lost (the recorder's stack ring stayed full)"}
_LINE = re.compile(r"-?\d{1,18}")


class StackSamples:
    """Every stack sample the converter writes: trace time, thread, callstack index."""

    def __init__(self):
        self.model = None
        self.pid_of = None
        self.log_start = None
        self.ts: list[np.ndarray] = []
        self.tid: list[np.ndarray] = []
        self.stack: list[np.ndarray] = []
        self.callstacks = None
        self.frames = None
        self.held = 0
        self.timer = False
        self.timer_threads: set = set()
        self.declined = ""


    def _offset(self):
        """BOOTTIME - MONOTONIC as the Perfetto writer takes it (None: timer samples keep exact times)."""
        clock = (self.model.header.get("clock") or {}) if self.model is not None else {}
        b, m = clock.get("boottime_ns"), clock.get("monotonic_ns")
        return b - m if isinstance(b, int) and isinstance(m, int) else None

    def stack_samples(self, ts, tid, pid, stack, callstacks, frames, label=None, timer=False) -> None:
        if self.declined:
            return
        ts = np.asarray(ts).astype(np.int64, copy=False).reshape(-1)
        if not ts.size:
            return
        if self.callstacks is None:
            self.callstacks, self.frames = callstacks, frames
        elif callstacks is not self.callstacks or frames is not self.frames:
            self._decline("stack samples from two sets of callstacks")
            return
        self.held += ts.size
        if self.held > MAX_SAMPLES:
            self._decline(f"more than {MAX_SAMPLES:,} stack samples")
            return
        tid = np.broadcast_to(np.asarray(tid, np.int64), ts.shape)
        off = self._offset()
        if timer and off is not None:
            self.timer = True
            pairs = np.unique((np.broadcast_to(np.asarray(pid, np.int64), ts.shape) << 32) | tid)
            self.timer_threads.update(pairs.tolist())
            if len(self.timer_threads) > MAX_THREAD_SEQUENCES:
                self._decline("more threads with timer samples than the writer gives sequences")
                return
            ts = (ts - off) // 1000 * 1000 + off  # the packet's MONOTONIC microseconds, back in BOOTTIME
        self.ts.append(ts.copy())
        self.tid.append(tid.astype(np.int32))
        self.stack.append(np.asarray(stack, np.int64).reshape(-1).astype(np.int32))

    def _decline(self, why: str) -> None:
        self.declined = why
        self.ts, self.tid, self.stack = [], [], []

    def of_thread(self, tid: int):
        """(trace times, callstack indices) of the samples of thread tid."""
        if not self.ts:
            return np.zeros(0, np.int64), np.zeros(0, np.int32)
        t = np.concatenate(self.tid)
        m = t == tid
        return np.concatenate(self.ts)[m], np.concatenate(self.stack)[m]

    def clock_moves(self) -> bool:
        """Whether the end block's clock snapshot gives another MONOTONIC offset than the header's."""
        end = (self.model.end or {}).get("clock_end") if self.model is not None else None
        if not isinstance(end, dict) or end.get("monotonic_ns") is None or end.get("boottime_ns") is None:
            return False
        if end.get("realtime_ns") is None:
            return False  # the writer leaves such a snapshot out
        return end["boottime_ns"] - end["monotonic_ns"] != self._offset()


def split_name(name: str):
    """(fn, file, line) as the SQL cuts a frame's name (instr/substr/cast), or None where the line
    part is not a plain integer (SQLite's cast would read a prefix of it: not modelled)."""
    p, c = name.find(" ("), name.find(":")
    fn = name[:p] if p >= 0 else name
    file = name[p + 2:c] if p >= 0 and c > p else ""
    if c < 0:
        return fn, file, None
    text = name[c + 1:len(name) - 1]
    return (fn, file, int(text)) if _LINE.fullmatch(text) else None


Collector = (SchedColumns, StackSamples)


def part(collectors, starts) -> dict | None:
    """The set's part and each (empty) chunk's, or None: no partial (the module doc)."""
    s = summarize(*collectors)
    return None if s is None else {"set": s, "chunks": [{} for _ in range(len(starts))]}


def _main(cols: SchedColumns):
    """tl_main_thread's tid; False for no main thread; None: not certain."""
    main = cols.main_thread()
    if main is not None:
        return main
    if not cols.main_declined:
        return False
    if not cols.declined and not cols.sw and not cols.marks and not cols.launch:
        return False  # no sched at all: the prelude's rules 3 and 4 find no thread either
    return None


def summarize(cols: SchedColumns, held: StackSamples) -> dict | None:
    if held.declined or not held.held:
        return None  # (no samples at all: the check is 'not recorded', which rows cannot say)
    base = {"version": VERSION}
    main = _main(cols)
    if main is None:
        return None
    if main is False:
        return {**base, "n": 0, "funcs": [], "more": False, "buckets": []}
    steady = cols.steady(main)
    if steady is None:
        return None
    if held.timer and held.clock_moves():
        return None
    ts, stack = held.of_thread(main["tid"])
    if steady:
        keep = (ts >= steady[0]) & (ts <= steady[1])
        stack = stack[keep]
    ids, cnt = np.unique(stack, return_counts=True)
    n = int(stack.size)
    parsed: dict = {}
    self_n: dict = {}
    total: dict = {}
    lines: dict = {}
    for s, c in zip(ids.tolist(), cnt.tolist()):
        idx = held.callstacks[s]
        if not idx:
            return None  # no frame: trace_processor's callsite for it is not modelled
        keys = []
        for f in idx:
            k = parsed.get(f)
            if k is None:
                name = frame_name(*held.frames[f])
                k = split_name(name)
                if k is None or name.startswith("_Z"):
                    return None
                parsed[f] = k
            keys.append(k)
        fn, file, line = keys[0]
        self_n[fn, file] = self_n.get((fn, file), 0) + c
        per = lines.setdefault((fn, file), {})
        per[line] = per.get(line, 0) + c
        for key in {(k[0], k[1]) for k in keys}:
            total[key] = total.get(key, 0) + c
    funcs, buckets = [], []
    for (fn, file), sn in sorted(self_n.items()):  # the SQL's group by (fn, file) order
        if file == "" and fn in (NO_FRAME, UNREADABLE, LOST):
            buckets.append([fn, sn, total[fn, file]])
            continue
        per = lines[fn, file]
        best = max(per.values())
        hot = [ln for ln, k in per.items() if k == best]
        funcs.append([fn, file, sn, total[fn, file], hot[0], len(hot) > 1])
    funcs.sort(key=lambda f: -f[2])
    return {**base, "n": n, "funcs": funcs[:MAX_FUNCS], "more": len(funcs) > MAX_FUNCS, "buckets": buckets}


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part (None: run the SQL; the module doc)."""
    if not isinstance(set_part, dict) or set_part.get("version") != VERSION:
        return None
    top = float(params["top"])
    if not top.is_integer() or top < 1:
        return None
    top = int(top)
    n, funcs = set_part["n"], set_part["funcs"]
    if n == 0:
        return [{"severity": "n/a", "finding": "no CPU samples of the main thread (record with the pystack family "
                 "and --py-sample-hz > 0)", "ts": None, "dur": None, "hint": None,
                 "self_samples": 0, "total_samples": 0, "self_fraction": 0}]
    if top >= len(funcs) and set_part["more"]:
        return None
    shown = funcs[:top]
    edge = [f[2] for f in funcs[:top + 1]]
    if any(a == b for a, b in zip(edge, edge[1:])) or any(f[5] for f in shown):
        return None  # the SQL's order (or its hottest line) there is its engine's row order
    rows = []
    for fn, file, sn, tot, hot, _ in shown:
        rows.append({"severity": "info", "ts": None, "dur": None, "hint": None,
                     "finding": f"{file}:{'?' if hot is None else hot} {fn}: {_fixed(100.0 * sn / n, 0)}% of the "
                                f"main thread's CPU samples in it (self), {_fixed(100.0 * tot / n, 0)}% under it "
                                f"(total), of {n:,}",
                     "self_samples": sn, "total_samples": tot, "self_fraction": _round(sn / n, 4)})
    for fn, sn, tot in set_part["buckets"]:
        what = BUCKET_TEXT.get(fn, "a Python stack that could not be read")
        rows.append({"severity": "info", "ts": None, "dur": None, "hint": None,
                     "finding": f"{_fixed(100.0 * sn / n, 0)}% of the main thread's CPU samples had {what} "
                                f"({sn:,} of {n:,})",
                     "self_samples": sn, "total_samples": tot, "self_fraction": _round(sn / n, 4)})
    return rows
