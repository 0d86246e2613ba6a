"""hang (sql/hang.sql) as a partial computed at conversion: what each thread was stuck in when the
recording ends. Through trace_processor a trace set's chunks each end somewhere in the middle of the
recording, so the SQL per chunk reports every thread asleep at each chunk's end; the partial sees the
one recording's end.

Inputs: the end of the recording as the SQL takes it (the latest end of any slice of dur > 0, of any
thread_state row of dur > 0, and the latest thread_state start), the long CUDA/NCCL calls (dur of at
least min_stuck_s, held as they pass: a few), and each thread's last thread_state row (`_sched.py`).
The set's part holds the rows ready (the threads stuck, a handful); chunk parts are empty.

No partial (the SQL runs) where `_sched.py` cannot say a thread's states, where two of a thread's
candidate calls or last states start at one ts (the SQL's row_number picks by row order), where a
thread or process it would name is not known to the converter, where the set starts after the log's
first record (trace_start()), or for other parameters than the defaults.
"""
from __future__ import annotations

import numpy as np

from ..catalog import BY_ID
from ._gpu import CUDA_CATS, _Strings, _fixed, fn_codes, made_with
from ...converters.model import OUTSIDE_COMM, OUTSIDE_TID
from ._sched import SchedColumns

CHECK = "hang"
VERSION = 1
AT_END_NS = 200_000_000  # "at the end" allows 200 ms (the SQL's)
MAX_CALLS = 100_000      # long calls held


class EndColumns:
    """The latest end of a slice of dur > 0 of any kind, and the CUDA/NCCL calls of dur >= the default
    min_stuck_s (their ts, dur, tid, pid, fn)."""

    def __init__(self, pid_of=None):
        self.pid_of = pid_of or (lambda tid: tid)
        self.s = _Strings()
        self.end = None
        self.calls: list[tuple] = []
        self.too_many = False
        self.min_ns = int(BY_ID[CHECK].defaults()["min_stuck_s"] * 1e9)

    def _ends(self, ts, dur) -> None:
        ts = np.asarray(ts, np.int64).reshape(-1)
        dur = np.broadcast_to(np.asarray(dur, np.int64), ts.shape)
        pos = dur > 0
        if pos.any():
            e = int((ts[pos] + dur[pos]).max())
            self.end = e if self.end is None else max(self.end, e)

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None) -> None:
        self.slices([ts], [dur], [tid], None if pid is None else [pid], name, cat)

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        self._ends(ts, dur)
        ts = np.asarray(ts, np.int64).reshape(-1)
        n = ts.size
        dur = np.broadcast_to(np.asarray(dur, np.int64), (n,))
        long = dur >= self.min_ns
        if not long.any():
            return
        cats = self.s.codes(cat, n)
        long &= np.isin(cats, [self.s.code(c) for c in CUDA_CATS])
        if not long.any():
            return
        tid = np.broadcast_to(np.asarray(tid, np.int64), (n,))
        pids = (np.array([self.pid_of(int(t)) if self.pid_of(int(t)) is not None else -1 for t in tid[long]], np.int64)
                if pid is None else np.broadcast_to(np.asarray(pid, np.int64), (n,))[long])
        fn = fn_codes(self.s, n, name)[long]
        self.calls.append((ts[long], dur[long], tid[long], pids, fn))
        if sum(c[0].size for c in self.calls) > MAX_CALLS:
            self.too_many, self.calls = True, []

    def group_slices(self, ts, dur, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        self._ends(ts, dur)

    def async_slice(self, track, ts, dur, name, cat, args=None) -> None:
        self._ends([ts], [dur])


def _process_name(model, pid: int):
    """process.name as trace_processor has it: the (last) cmdline's first word, else the comm."""
    p = model.processes.get(pid) if model is not None else None
    if p is None:
        return None
    return p.cmdline[0] if p.cmdline else p.name


Collector = (EndColumns, SchedColumns)


def part(collectors, starts) -> dict | None:
    ends, sched = collectors
    if ends.too_many or not len(starts) or sched.log_start != int(starts[0]) or sched.model is None:
        return None
    p = BY_ID[CHECK].defaults()
    stuck = int(p["min_stuck_s"] * 1e9)
    if sched.declined:
        return None  # over its row cap (its rows are let go: "no switch" would read as no thread at all)
    cols = sched._columns() if sched.sw else None
    if sched.sw and cols is None:
        return None
    tids = set()
    if cols is not None:
        sw, wk, fk = cols
        tids = set(np.unique(np.r_[sw["prev"], sw["next"], wk["woken"], fk["child"]]).tolist()) - {0}
    last = {}
    end = ends.end
    for tid in sorted(tids):
        st = sched.thread_states(tid)
        if st is None:
            return None
        if not st["ts"].size:
            continue
        ts, dur = st["ts"], st["dur"]
        pos = dur > 0
        hi = int(max((ts[pos] + dur[pos]).max() if pos.any() else ts.max(), ts.max()))
        end = hi if end is None else max(end, hi)
        top = int(ts.max())
        at = np.flatnonzero(ts == top)
        if at.size > 1:
            return None  # two last rows at one ts: row_number picks by row order
        last[tid] = (top, int(dur[at[0]]), st["state"][at[0]])
    if end is None:
        return {"set": _part([]), "chunks": [{} for _ in range(len(starts))]}
    open_calls = {}
    if ends.calls:
        c_ts, c_dur, c_tid, c_pid, c_fn = (np.concatenate(c) for c in zip(*ends.calls))
        sel = (c_ts + c_dur >= end - AT_END_NS) & (c_dur >= stuck)
        for tid in np.unique(c_tid[sel]).tolist():
            m = sel & (c_tid == tid)
            latest = c_ts[m].max()
            if int((c_ts[m] == latest).sum()) > 1:
                return None  # two calls of the thread from one ts: row_number's pick is row order
            k = np.flatnonzero(m & (c_ts == latest))[0]
            open_calls[tid] = (int(latest), int(c_pid[k]), ends.s.strings[int(c_fn[k])])
    asleep = {tid: (ts, state) for tid, (ts, dur, state) in last.items()
              if state in ("S", "D") and (dur < 0 or ts + dur >= end - AT_END_NS) and end - ts >= stuck}
    rows = []
    m = sched.model
    for tid in sorted(set(open_calls) | set(asleep)):
        call = open_calls.get(tid)
        state = asleep.get(tid)
        since = call[0] if call else state[0]
        if tid == OUTSIDE_TID:  # the tasks outside the recording: one thread in no process
            pid, process, name = None, "?", OUTSIDE_COMM
        else:
            t, pid = m.threads.get(tid), sched.pid_of(tid)
            process = None if pid is None else _process_name(m, pid)
            name = None if t is None else t.name
            if name is None or process is None:
                return None  # a name or process the converter does not know (the SQL prints '?')
        rows.append([pid, process, name, tid, call[2] if call else None, None if state is None else state[1], since])
    # the SQL's order: calls first, then by pid (NULL first), since; equal ones by tid
    rows.sort(key=lambda r: (r[4] is None, r[0] is not None, r[0] or 0, r[6], r[3]))
    return {"set": _part(rows, end, int(starts[0])), "chunks": [{} for _ in range(len(starts))]}


def _part(rows, end=None, start=None) -> dict:
    return {"version": VERSION, "params": BY_ID[CHECK].defaults(), "end": end, "start": start, "rows": rows}


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part (None where the partial does not apply: run the SQL)."""
    if not made_with(set_part, VERSION, params):
        return None
    out = []
    end, t0 = set_part["end"], set_part["start"]
    for pid, process, thread, tid, call, state, since in set_part["rows"]:
        what = f"in {call}" if call is not None else (
            "in an uninterruptible wait (D)" if state == "D" else "asleep (S)")
        out.append({"severity": "error" if call is not None else "info",
                    "finding": (f"pid {pid or 0} ({process}), thread {thread} (tid {tid}): {what} since "
                                f"+{_fixed((since - t0) / 1e9, 3)} s, {_fixed((end - since) / 1e9, 1)} s before the "
                                "trace ends"),
                    "ts": since, "dur": end - since, "hint": None, "pid": pid, "tid": tid, "thread": thread,
                    "call": call, "state": state})
    return out
