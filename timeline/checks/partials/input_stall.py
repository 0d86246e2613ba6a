"""input_stall (sql/input_stall.sql) as a partial computed at conversion.

Its inputs are the thread states _sched.py rebuilds from the switches and wakings (trace_processor's
thread_state: ts, dur, state, waker) with its threads, processes and main-thread pick, and the
pystack family's `wait` slices on the main thread (ts, dur, the innermost frame of their `py` arg),
held from pass 2's slice batches. Everything the SQL computes hangs on the whole recording (the
main thread, the DataLoader's span, the windows over it), so the partial is the set's part only,
worked out at the end of the conversion; each chunk's part is empty:
- the main thread's waits: its sleeps (S, D*; dur > 0) whose next state row (by ts, over all its
  rows) was woken by a provider (a thread of a worker process, or one named pt_data_worker /
  pt_data_pin); their total;
- the workers' main threads' time per state within those waits (span_join: the intersections, by
  the waits' cumulative time at each state row's ends), and the Python lines the main thread waited
  at (its `wait` slices, each cut at the next one's start, within the waits), the top 3;
- the DataLoader's span (the first to the last worker thread state) and, over its windows
  (_tl_windows, widened past WINDOW_CAP), the waits per window: the worst max_windows at or above
  warn_fraction.
Bounded: a few numbers, 3 lines and max_windows windows.

No partial (the SQL runs) where _sched.py has none (its module doc: a thread's states or the main
thread not certain; "no main thread" is told here: no marker, no launch and no process outside the
workers that ran), where the SQL's answer hangs on trace_processor's row order: two main-thread
state rows or two of its `wait` slices at the same ts (which one `lead` sees next), `wait` slices
that cross or touch (trace_processor ends the innermost open slice first: the durations it keeps
are not the written ones), two worst windows of the same share where the order or the cut depends
on it; where the recording has no scheduling data (the check is 'not recorded' there), past
MAX_WAITS held waits, or for other parameters than the defaults.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...converters.model import IDLE_TID, OUTSIDE_TID
from ..catalog import BY_ID, WINDOW_CAP
from ._gpu import _fixed, _g, _py_line, _round, made_with
from ._sched import SchedColumns

CHECK = "input_stall"
VERSION = 1
WORKER, PIN = "pt_data_worker", "pt_data_pin"   # the prelude's _tl_workers and _tl_is_providers
WAIT_CAT, WAIT_NAME = "python", "wait"          # the pystack family's waits (_tl_is_py)
MAX_WAITS = 5_000_000                           # held `wait` slices (5 numbers each)

HINTS = {
    "disk": "workers are mostly in disk wait: the input is I/O-bound; cache the data, use faster storage or more "
            "workers to overlap reads",
    "running": "workers are mostly computing: data loading is CPU-bound; add workers (if there are idle cores) or "
               "make per-sample transforms cheaper",
    "runnable": "workers are runnable but not running: not enough CPUs for the workers; reduce other load or the "
                "number of threads per worker",
    "sleeping": "workers are mostly sleeping (locks, network, sleep calls): find what __getitem__ waits on",
}
NO_WORKERS = ("no DataLoader worker processes (pt_data_worker) in this trace: with num_workers=0 the main thread "
              "loads batches itself and a stall cannot be told apart from training")
NO_MAIN = "DataLoader workers found but no main training thread"
COLUMNS = ("severity", "finding", "ts", "dur", "hint", "stall_fraction", "waited_s", "workers",
           "workers_disk_wait_fraction", "workers_running_fraction", "python_line", "python_share")


class WaitSlices:
    """Holds the pystack family's `wait` slices (dur > 0) of every thread from the slice batches: ts,
    dur, tid, pid and the innermost frame of `py` (-1: no arg or an unknown stack)."""

    def __init__(self, pid_of=None):
        self.pid_of = pid_of or (lambda tid: tid)
        self.waits: list[tuple] = []
        self.lines: list = []       # innermost frames; waits hold their index
        self._line_code: dict = {}
        self.n_waits = 0
        self.too_many_waits = False

    def _code(self, stack) -> int:
        line = None if stack is None else _py_line(str(stack))
        if line is None:
            return -1
        c = self._line_code.get(line)
        if c is None:
            c = self._line_code[line] = len(self.lines)
            self.lines.append(line)
        return c

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None) -> None:
        if cat == WAIT_CAT and name == WAIT_NAME and dur > 0:
            p = pid if pid is not None else self.pid_of(tid)
            self._hold_waits([ts], [dur], [tid], [p if p is not None else tid], [self._code((args or {}).get("py"))])

    def group_slices(self, *a, **k) -> None:
        pass  # GPU work: not read here

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        if not isinstance(cat, str) or not isinstance(name, str) or cat != WAIT_CAT or name != WAIT_NAME:
            return  # the pystack family writes its waits in batches of that one name and category
        ts = np.asarray(ts, np.int64).reshape(-1)
        n = ts.size
        dur = np.broadcast_to(np.asarray(dur, np.int64), (n,))
        keep = dur > 0
        tid = np.broadcast_to(np.asarray(tid, np.int64), (n,))
        pid = (np.array([p if (p := self.pid_of(t)) is not None else t for t in tid.tolist()], np.int64)
               if pid is None else np.broadcast_to(np.asarray(pid, np.int64), (n,)))
        py = next((c for c in args or () if getattr(c, "key", None) == "py"), None)
        codes = np.full(n, -1, np.int64)
        if py is not None and py.strings:
            codes = np.array([self._code(x) for x in py.strings], np.int64)[np.asarray(py.values, np.int64)]
            if py.present is not None:
                codes = np.where(py.present, codes, -1)
        self._hold_waits(ts[keep], dur[keep], tid[keep], pid[keep], codes[keep])

    def _hold_waits(self, ts, dur, tid, pid, code) -> None:
        self.n_waits += len(ts)
        if self.n_waits > MAX_WAITS:
            self.too_many_waits, self.waits = True, []
            return
        self.waits.append(tuple(np.asarray(a, np.int64) for a in (ts, dur, tid, pid, code)))

    def waits_of(self, tid: int, pid: int):
        """(ts, dur, line or None) of a thread's waits by start, or None (too many to hold)."""
        if self.too_many_waits:
            return None
        if not self.waits:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), []
        ts, dur, t, p, code = (np.concatenate(c) for c in zip(*self.waits))
        m = (t == tid) & (p == pid)
        o = np.argsort(ts[m], kind="stable")
        return ts[m][o], dur[m][o], [self.lines[c] if c >= 0 else None for c in code[m][o].tolist()]


Collector = (WaitSlices, SchedColumns)  # the `wait` slices; _sched.py's switches, wakings and main-thread picks


@dataclass
class Inputs:
    """What the SQL reads, as _sched.py rebuilds it (the names are the SQL's tables)."""
    any_workers: bool                  # _tl_workers has a row
    main: tuple | None                 # tl_main_thread: (name, tid); None: no row
    main_states: tuple                 # its thread_state rows, all of them: ts, dur, state (str array), waker
                                       # utid (-1: none), sorted by ts
    providers: np.ndarray              # _tl_is_providers' utids
    span: tuple | None                 # _tl_is_span: (ts, end_ts); None: no worker state with dur > 0
    workers: int                       # _tl_is_wmain's rows
    wmain_states: tuple                # _tl_is_wstate: ts, dur, state (str array), dur > 0
    py: tuple                          # the main thread's `wait` slices, dur > 0: ts, dur, line (str or None),
                                       # sorted by ts


def _cum(s: np.ndarray, e: np.ndarray):
    """For sorted, non-overlapping intervals [s, e): t -> their total length before t."""
    before = np.concatenate([[0], np.cumsum(e - s)])

    def until(t):
        t = np.asarray(t, np.int64)
        i = np.searchsorted(s, t, "right")
        last = np.maximum(i - 1, 0)
        inside = np.where(i > 0, np.clip(t - s[last], 0, e[last] - s[last]), 0) if s.size else 0
        return np.where(i > 0, before[last], 0) + inside
    return until


def _state_kind(states: np.ndarray) -> dict:
    """The SQL's state classes: masks per class of thread_state.state strings."""
    st = np.asarray(states, dtype=object)
    running = np.array([s == "Running" for s in st], bool)
    return {"running": running,
            "runnable": np.array([isinstance(s, str) and s.startswith("R") for s in st], bool) & ~running,
            "disk": np.array([isinstance(s, str) and s.startswith("D") for s in st], bool),
            "sleeping": np.array([s == "S" for s in st], bool)}


def _nested(s: np.ndarray, e: np.ndarray) -> bool:
    """Whether slices sorted by start nest properly: none starts inside another, or where another
    ends (which of the two trace_processor sees first is the order they were written in), and ends
    after it. Then trace_processor keeps their ends as written."""
    open_ends: list = []
    for a, b in zip(s.tolist(), e.tolist()):
        while open_ends and open_ends[-1] < a:
            open_ends.pop()
        if open_ends and b > open_ends[-1]:
            return False
        open_ends.append(b)
    return True


def summarize(inp: Inputs, params: dict) -> dict | None:
    """The set's part (see merge), or None where the SQL's answer hangs on its row order."""
    out = {"version": VERSION, "params": dict(params), "any_workers": bool(inp.any_workers),
           "main": None if inp.main is None else [str(inp.main[0]), int(inp.main[1])]}
    if inp.span is None:
        return {**out, "span": None}
    s0, s1 = (int(x) for x in inp.span)
    want = int(float(params["window_s"]) * 1e9)
    step = max(want, (s1 - s0 + WINDOW_CAP - 1) // WINDOW_CAP)  # _tl_window_step
    out.update(span=[s0, s1], step=int(step), workers=int(inp.workers))
    if inp.main is None:
        return out  # no waits (_tl_is_wait reads no thread): the n/a row and the windows' width only
    ts, dur, state, waker = inp.main_states
    if ts.size > 1 and (ts[1:] == ts[:-1]).any():
        return None  # lead() over rows of the same ts: trace_processor's order
    woke_by = np.r_[np.asarray(waker, np.int64)[1:], -1]
    kind = _state_kind(state)
    wait = ((dur > 0) & (kind["sleeping"] | kind["disk"]) & np.isin(woke_by, inp.providers)
            & (woke_by >= 0))
    ws, we = ts[wait], ts[wait] + dur[wait]
    waited = int((we - ws).sum())
    until = _cum(ws, we)
    # the workers' main threads' states within the waits (_tl_is_ws)
    a, b, wstate = inp.wmain_states
    inter = until(b) - until(a) if a.size else np.zeros(0, np.int64)
    wk = _state_kind(wstate)
    states = [int(inter[wk[k]].sum()) for k in ("running", "runnable", "disk", "sleeping")] + [int(inter.sum())]
    if not (inter > 0).any():
        states = None  # _tl_is_sj is empty: its fractions are NULL
    # the Python lines (_tl_is_py, _tl_is_pyl): each wait slice cut at the next one's start
    pts, pdur, pline = inp.py
    if pts.size > 1 and (pts[1:] == pts[:-1]).any():
        return None  # which one lead() sees next: trace_processor's order
    if not _nested(pts, pts + pdur):
        return None  # trace_processor ends the innermost open slice first: their durations would differ
    nxt = np.r_[pts[1:], pts[-1:] + pdur[-1:]] if pts.size else pts
    pend = pts + np.minimum(pdur, nxt - pts)
    lines: dict = {}
    got = until(pend) - until(pts) if pts.size else np.zeros(0, np.int64)
    for line, w in zip(pline, got.tolist()):
        if line is not None and w > 0:  # a line whose slices meet no wait is not in the span join
            lines[line] = lines.get(line, 0) + int(w)
    top = sorted(lines.items(), key=lambda kv: (-kv[1], kv[0].encode()))[:3]  # SQLite orders text by bytes
    # the windows over the DataLoader's span (_tl_is_win, _tl_is_wj)
    n = max(1, (s1 - s0 + step - 1) // step)
    w0 = s0 + np.arange(n, dtype=np.int64) * step
    wdur = np.minimum(step, s1 - w0)
    wwait = until(w0 + wdur) - until(w0)
    windows = []
    if waited >= params["warn_fraction"] * (s1 - s0):
        ok = (wwait > 0) & (wwait >= params["warn_fraction"] * wdur)
        share = wwait[ok] * 1.0 / wdur[ok]
        o = np.argsort(-share, kind="stable")  # the SQL's order: share, then the earliest window (w0 ascends)
        k = int(params["max_windows"])
        windows = [[int(w0[ok][i]), int(wdur[ok][i]), int(wwait[ok][i])] for i in o[:k].tolist()]
    return {**out, "waited": waited, "states": states, "lines": [[line, w] for line, w in top], "windows": windows}


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part (None where the partial does not apply: run the SQL)."""
    if not made_with(set_part, VERSION, params):
        return None
    rows = []

    def row(**kw):
        rows.append({c: kw.get(c) for c in COLUMNS})
    main, span = set_part["main"], set_part["span"]
    if span is not None and main is not None and span[1] > span[0]:
        _stall_rows(set_part, params, row)
    if span is not None:
        s0, s1 = span
        want = int(float(params["window_s"]) * 1e9)
        step = int(set_part["step"])
        if step > want:
            row(severity="info", finding=(
                f"the DataLoader's run of {_fixed((s1 - s0) / 1e9, 0)} s would need {(s1 - s0 + want - 1) // want:,} "
                f"windows of {_g(params['window_s'])} s: they are {_fixed(step / 1e9, 0)} s long instead "
                f"({(s1 - s0 + step - 1) // step:,} of them)"))
    if not set_part["any_workers"]:
        row(severity="n/a", finding=NO_WORKERS)
    elif main is None:
        row(severity="n/a", finding=NO_MAIN)
    return rows


def _stall_rows(p: dict, params: dict, row) -> None:
    (name, tid), (s0, s1) = p["main"], p["span"]
    span, waited = s1 - s0, int(p["waited"])
    sev = ("error" if waited >= params["error_fraction"] * span else
           "warning" if waited >= params["warn_fraction"] * span else "ok")
    text = (f"main thread {name} (tid {tid}) waited for batches {_fixed(100.0 * waited / span, 0)}% of the "
            f"DataLoader's run ({_fixed(waited / 1e9, 2)} s of {_fixed(span / 1e9, 2)} s)")
    if p["states"] is None:
        running = runnable = disk = sleeping = None
    else:
        r, q, d, s, total = p["states"]
        running, runnable, disk, sleeping = (1.0 * x / total for x in (r, q, d, s))
    if waited > 0:  # printf's %.0f of NULL is 0
        pct = [_fixed(100 * (x or 0.0), 0) for x in (running, runnable, disk, sleeping)]
        text += (f"; meanwhile its {p['workers']} workers were running {pct[0]}%, runnable {pct[1]}%, in disk wait "
                 f"(D) {pct[2]}%, sleeping {pct[3]}% of the time")
    if p["lines"]:
        text += "; it waited in Python at " + ", ".join(f"{line} ({_fixed(100.0 * w / waited, 0)}%)"
                                                       for line, w in p["lines"])
    if running is None:
        hint = HINTS["sleeping"]  # max() of NULLs is NULL: the CASE's else
    else:
        top = max(running, runnable, disk, sleeping)
        hint = HINTS["disk" if top == disk else "running" if top == running else "runnable" if top == runnable
                     else "sleeping"]
    line, share = (p["lines"][0][0], 1.0 * p["lines"][0][1] / waited) if p["lines"] else (None, None)
    row(severity=sev, finding=text, ts=s0, dur=span, hint=hint, stall_fraction=_round(1.0 * waited / span, 4),
        waited_s=_round(waited / 1e9, 3), workers=int(p["workers"]),
        workers_disk_wait_fraction=None if disk is None else _round(disk, 3),
        workers_running_fraction=None if running is None else _round(running, 3),
        python_line=line, python_share=None if share is None else _round(share, 4))
    for ts, dur, w in p["windows"]:
        row(severity="info", finding=(f"worst window: the main thread waited {_fixed(100.0 * w / dur, 0)}% of it "
                                      f"({_fixed(w / 1e9, 2)} s)"),
            ts=ts, dur=dur, stall_fraction=_round(1.0 * w / dur, 4), waited_s=_round(w / 1e9, 3))


def part(collectors, starts) -> dict | None:
    """The set's part and each (empty) chunk's, or None: no partial (the module doc)."""
    inp = inputs(*collectors)
    s = None if inp is None else summarize(inp, BY_ID[CHECK].defaults())
    return None if s is None else {"set": s, "chunks": [{} for _ in range(len(starts))]}


def inputs(held: WaitSlices, cols: SchedColumns) -> Inputs | None:
    """The SQL's inputs from _sched.py's tables and the held waits, or None where not certain."""
    m = cols.model
    sl = cols.sched_slices()
    if m is None or sl is None or not sl["ts"].size:
        return None  # no scheduling data: the check is 'not recorded' there
    workers = {pid for pid, p in m.processes.items()  # _tl_workers
               if p.name == WORKER or ((t := m.threads.get(pid)) is not None and t.name == WORKER)}
    main = cols.main_thread()
    if main is None and not _no_main_process(cols, workers):
        return None  # a main thread the prelude picks by rules _sched.py does not model, or by row order
    in_workers = [t.tid for t in m.threads.values() if t.tgid in workers]
    providers = np.array(sorted(set(in_workers) | {t.tid for t in m.threads.values() if t.name in (WORKER, PIN)}),
                         np.int64)
    states = {tid: cols.thread_states(tid) for tid in in_workers}
    if any(v is None for v in states.values()):
        return None
    lo, hi = [], []
    for st in states.values():
        pos = st["dur"] > 0
        if pos.any():
            lo.append(int(st["ts"][pos].min()))
            hi.append(int((st["ts"][pos] + st["dur"][pos]).max()))
    leaders = [st for tid, st in states.items() if tid in workers]  # _tl_is_wmain: tid = pid
    wa, wb, ws = [], [], []
    for st in leaders:
        pos = st["dur"] > 0
        wa.append(st["ts"][pos])
        wb.append(st["ts"][pos] + st["dur"][pos])
        ws.append(st["state"][pos])
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt))
    main_states = py = None
    if main is not None:
        st = cols.thread_states(main["tid"])
        py = held.waits_of(main["tid"], main["pid"])
        if st is None or py is None:
            return None
        main_states = (st["ts"], st["dur"], st["state"], st["waker"])
        py = (py[0], py[1], py[2])
    return Inputs(any_workers=bool(workers), main=None if main is None else (main["name"], main["tid"]),
                  main_states=main_states, providers=providers,
                  span=(min(lo), max(hi)) if lo else None, workers=len(leaders),
                  wmain_states=(cat(wa, np.int64), cat(wb, np.int64), cat(ws, object)), py=py)


def _no_main_process(cols: SchedColumns, workers: set) -> bool:
    """Whether the prelude finds no main thread at all: no marker, no launch (_sched.py's rules 1 and
    2 found none) and no process outside the workers that ran (rules 3 and 4 read _tl_main_process,
    a process with scheduling data). Separate from _sched.py, which does not model rules 3 and 4."""
    if cols.marks or cols.launch:
        return False
    ran = np.unique(cols.sched_slices()["tid"]).tolist()
    m = cols.model
    return not any(t not in (IDLE_TID, OUTSIDE_TID) and t in m.threads and m.threads[t].tgid not in workers
                   for t in ran)
