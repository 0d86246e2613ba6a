"""Thread states and CPU occupancy as trace_processor (v52) rebuilds them from the compact sched the
converter writes, for the partials of the checks that read `thread_state` or `sched` (cpu_contention,
input_stall, launch_latency), plus the prelude's picks they hang on (tl_main_thread,
tl_backward_thread, tl_steady).

API (all times ns, BOOTTIME as in the trace; tids as the trace shows them: 0 idle, OUTSIDE_TID the
"outside the recording" pseudo thread):

  SchedColumns                the Collector. Fed by the converter: `sched(chunks)` (the model's
                              CpuSched blocks, as the one trace carries them), `proc(recs)` (proc
                              records: forks open a thread's first state), `slice`/`slices`/
                              `group_slices` (as GpuColumns: markers, CUDA calls, launches, and
                              for launch_latency each launch's dur, function, kernel and py args
                              (`launch_more`) and every other thread slice's tid, start, end
                              (`spans`: how trace_processor nests them)).
                              `declined`: why there is no partial ('' if none yet).
  .thread_states(tid)         -> {"ts", "dur", "waker": int64 arrays, "state": object array of str or
                                  None} in thread_state's row order for that thread, or None where the
                                  rows are not certain (see below). dur is -1 for a state still open at
                                  the end of the trace (what the SQL sees: its `dur > 0` drops it);
                                  state: 'Running', 'R', 'R+', 'S', 'D', 'SD', ... None where
                                  trace_processor gives NULL; waker: on the runnable rows a waking
                                  opened, the tid its CPU was running then (compact sched names no
                                  waker: that is trace_processor's waker_utid), on the one a fork
                                  opened the parent; -1 elsewhere. Empty for tid 0.
  .sched_slices()             -> {"cpu", "ts", "dur", "tid": int64 arrays}, the `sched` table sorted by
                                  (cpu, ts): who ran on each CPU from ts for dur (tid 0: idle; the last
                                  slice of each CPU has dur -1), or None.
  .run_ns(tid)                -> sum(sched.dur) of the thread (the prelude's _tl_run.run_ns, the -1 of
                                  an open last slice included), 0 if it never ran.
  .main_thread()              -> {"tid", "pid", "name", "why"} (tl_main_thread) or None: no main thread
                                  (n/a), or not certain (`main_declined` says why: a tie the SQL breaks
                                  by row order, or the prelude's rules 3/4, not modelled).
  .backward_thread(main)      -> {"tid", "name"} (tl_backward_thread), False for none, None: not certain.
  .steady(main)               -> (ts, end_ts) of tl_steady, False for no row (no CUDA call in the main
                                  process), None if not certain.
  .start_bounds()             -> (lo, hi): trace_start() of the one trace lies in [lo, hi] (the log's
                                  first record, the first switch the trace keeps or the first event the
                                  sink wrote, if earlier: instants can be); a "+x s" printed
                                  from it is certain where both ends print alike.
Numbers go out as the SQL prints them with _gpu._fixed / _round (printf %.Nf, round(): the exact
binary value rounded half away from zero, as trace_processor's SQLite does).

How trace_processor turns the switches into states (checked row for row by tests/unit/
test_sched_partials.py): each CPU's first switch is dropped (it has no prev), with the wakings on
that CPU before it; a switch closes the prev thread's open state (unless that state was not
Running: lost data, the old row stays open, dur -1) and opens the prev_state one, then closes the
next thread's and opens Running; a waking of a thread with no row opens R; of a thread that is
Running or R it is ignored; else it closes the open state and opens R (so an R+ thread woken becomes
R); a fork opens R for the child (waker: the parent) without closing anything; the idle task gets no
row. At one time on one CPU, the switches of a compact_sched bundle come before its wakings. Where a
thread has two events at one time that are not switches on one CPU, or a waking of it comes at the
time of a switch on its CPU in another bundle (trace_processor orders them as its sorter likes), a tid that was forked twice or ran before its fork (two utids),
or a recording above MAX_ROWS, the answer is None and the checks run through trace_processor.
"""
from __future__ import annotations

import fnmatch

import numpy as np

from ... import proc_records
from ...converters.interface import Column
from ...converters.model import IDLE_TID, OUTSIDE_TID
from ...converters.perfetto.writer import MAX_BUNDLE
from ._gpu import (CUDA_CATS, MAIN_CAT, MAIN_MARK, MAX_ROWS, _arg, _Strings, arg_codes, fn_codes, launch_keys,
                   marked_main, startup_ends)

_LETTERS = "SDTtXZPI"  # prev_state bits 0..7 (kernel >= 4.14), as trace_processor prints them
_PREEMPT = 0x100       # TASK_REPORT_MAX: preempted while runnable -> R+
_OUT, _IN, _WAKE, _NEW = 0, 1, 2, 3  # a thread's events


def state_name(v: int):
    """prev_state as thread_state shows it (kernel >= 4.14 encoding); None for what it leaves NULL."""
    if v & ~(_PREEMPT | 0xFF):
        return None
    if v & 0xFF == 0:
        return "R+" if v & _PREEMPT else "R"
    return "".join(c for i, c in enumerate(_LETTERS) if v >> i & 1)


def _names(v: np.ndarray) -> np.ndarray:
    """state_name of each prev_state (an object array), worked out once per distinct value."""
    uniq, inv = np.unique(v, return_inverse=True)
    return np.array([state_name(int(x)) for x in uniq.tolist()] + [None], object)[:-1][inv.reshape(-1)]


def _replay(ts: np.ndarray, kind: np.ndarray, arg: np.ndarray) -> dict:
    """A thread's rows from its events in trace_processor's order (the module doc's rules), without a
    loop over them: a waking counts only as the first after a switch-out to a blocked state (or as the
    thread's first event), as a thread Running or R ignores it; each row lasts until the next one, but
    for a switch-out of a thread that was not Running (lost data) and a fork, which leave it open."""
    out_state = np.full(ts.size, None, object)
    out = kind == _OUT
    out_state[out] = _names(arg[out])
    wake = kind == _WAKE
    # the last event that is not a waking, at or before each event (-1: none)
    last = np.maximum.accumulate(np.where(~wake, np.arange(ts.size), -1)) if ts.size else np.zeros(0, np.int64)
    before = np.r_[-1, last[:-1]] if ts.size else last  # ... strictly before
    b = np.maximum(before, 0)
    awake = (before >= 0) & ((kind[b] == _IN) | (kind[b] == _NEW) | ((kind[b] == _OUT) & (out_state[b] == "R")))
    first = np.r_[True, ~wake[:-1]] if ts.size else wake  # the first waking since that event
    keep = ~wake | (first & ~awake)
    ts, kind, arg, state = ts[keep], kind[keep], arg[keep], out_state[keep]
    state[kind == _IN] = "Running"
    state[(kind == _WAKE) | (kind == _NEW)] = "R"
    closes = (kind[1:] == _IN) | (kind[1:] == _WAKE) | ((kind[1:] == _OUT) & (state[:-1] == "Running"))
    dur = np.r_[np.where(closes, ts[1:] - ts[:-1], -1), -1] if ts.size else np.zeros(0, np.int64)
    return {"ts": ts, "dur": dur.astype(np.int64), "waker": np.where((kind == _WAKE) | (kind == _NEW), arg, -1),
            "state": state}


class SchedColumns:
    """The switches, wakings and forks of the recording, and what picks the main thread."""

    def __init__(self, pid_of=None):
        self.s = _Strings()
        self.pid_of = pid_of or (lambda tid: tid)
        self.model = None        # the LogModel (the converter sets it): thread names, processes
        self.log_start = None
        self.sw: list[tuple] = []     # cpu, ts, prev, next, prev_state
        self.wk: list[tuple] = []     # cpu, ts, waker, woken
        self.forks: list[tuple] = []  # ts, parent tid, child tid
        self.launch: list[tuple] = []  # ts, tid, pid, kernel key
        self.launch_more: list[tuple] = []  # beside each: dur, fn, kernel arg, py arg (launch_latency's)
        self.spans: list[tuple] = []  # every other thread slice: tid, ts, end (launch_latency's: how they nest)
        self.cuda: dict[int, list] = {}  # pid -> [first CUDA call ts, last CUDA call end]
        self.marks: list[tuple] = []  # the recorder's main-thread markers: dur, ts, tid, pid
        self.rows = 0
        self._blocks = 0
        self.declined = ""
        self.main_declined = ""
        self._cols = None
        self._states: dict = {}
        self._sched = None
        self.first_event: int | None = None  # the earliest slice, instant, counter or sample written (_seen)

    def _hold(self, n: int) -> bool:
        self.rows += n
        if self.rows > MAX_ROWS and not self.declined:
            self.declined = f"more than {MAX_ROWS:,} rows"
            self.sw, self.wk, self.forks, self.launch, self.launch_more, self.spans = [], [], [], [], [], []
        return not self.declined

    # -- what the converter writes
    def sched(self, chunks) -> None:
        for c in chunks:
            if not self._hold(c.sw_ts.size + c.wk_ts.size):
                return
            self._blocks += 1  # the writer's compact_sched bundles: per block and CPU, MAX_BUNDLE events each
            if c.sw_ts.size:
                self.sw.append((np.full(c.sw_ts.size, c.cpu, np.int32), c.sw_ts.astype(np.int64),
                                c.sw_prev.astype(np.int32), c.sw_next.astype(np.int32),
                                c.sw_state.astype(np.int32), self._bundles(c.sw_ts.size)))
            if c.wk_ts.size:
                self.wk.append((np.full(c.wk_ts.size, c.cpu, np.int32), c.wk_ts.astype(np.int64),
                                c.wk_waker.astype(np.int32), c.wk_woken.astype(np.int32),
                                self._bundles(c.wk_ts.size)))

    def _bundles(self, n: int) -> np.ndarray:
        return self._blocks << 20 | np.arange(n, dtype=np.int64) // MAX_BUNDLE

    def proc(self, recs: np.ndarray) -> None:
        f = recs[recs["kind"] == proc_records.PROC_FORK]
        if f.size and self._hold(f.size):
            self.forks.append((f["ts"].astype(np.int64), f["tid"].astype(np.int32), f["child_tid"].astype(np.int32)))

    def _seen(self, ts) -> None:
        """The earliest event the sink writes (trace_start() is at or before it)."""
        ts = np.asarray(ts, np.int64)
        if ts.size:
            t = int(ts.min())
            self.first_event = t if self.first_event is None else min(self.first_event, t)

    def instant(self, ts, tid, pid, name, cat, args=None) -> None:
        self._seen([ts])

    def async_slice(self, track, ts, dur, name, cat, args=None) -> None:
        self._seen([ts])

    def counters(self, name, ts, values, pid=None) -> None:
        self._seen(ts)

    def group_counters(self, group, name, ts, values) -> None:
        self._seen(ts)

    def stack_samples(self, ts, tid, pid, stack, callstacks, frames, label=None, timer=False) -> None:
        self._seen(ts)

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None) -> None:
        self._seen([ts])
        if cat == MAIN_CAT and name == MAIN_MARK:
            self.marks.append((int(dur), int(ts), int(tid), int(pid if pid is not None else self.pid_of(tid) or tid)))
        if cat in CUDA_CATS:
            self.slices([ts], [dur], [tid], None if pid is None else [pid], name, cat, [
                Column(k, "str", np.zeros(1, np.int64), [str(v)]) for k, v in (args or {}).items() if v is not None])
        elif not self.declined and self._hold(1):
            self.spans.append((np.array([tid], np.int32), np.array([ts], np.int64), np.array([ts + max(dur, 0)], np.int64)))

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        ts = np.asarray(ts, np.int64).reshape(-1)
        self._seen(ts)
        n = ts.size
        if not n or self.declined:
            return
        cuda = np.isin(self.s.codes(cat, n), [self.s.code(c) for c in CUDA_CATS])
        tid = np.broadcast_to(np.asarray(tid, np.int64), (n,))
        launch, key = launch_keys(self.s, n, name, cuda, args) if cuda.any() else (np.zeros(n, bool), None)
        other = ~launch  # the sink writes each as begin/end packets at ts and ts + max(dur, 0)
        if other.any() and self._hold(int(other.sum())):
            self.spans.append((tid[other].astype(np.int32), ts[other],
                               ts[other] + np.maximum(np.broadcast_to(np.asarray(dur, np.int64), (n,))[other], 0)))
        if not cuda.any():
            return
        pids = (np.broadcast_to(np.asarray(pid, np.int64), (n,)) if pid is not None else
                np.array([p if (p := self.pid_of(t)) is not None else t for t in tid.tolist()], np.int64))
        end = ts + np.broadcast_to(np.asarray(dur, np.int64), (n,))
        for p in np.unique(pids[cuda]).tolist():
            m = cuda & (pids == p)
            lo, hi = int(ts[m].min()), int(end[m].max())
            have = self.cuda.setdefault(p, [lo, hi])
            have[0], have[1] = min(have[0], lo), max(have[1], hi)
        if launch.any() and self._hold(int(launch.sum())):
            self.launch.append((ts[launch], tid[launch].astype(np.int32), pids[launch].astype(np.int32),
                                key[launch].astype(np.int32)))
            kernel = _arg(args, "kernel")
            self.launch_more.append((
                np.broadcast_to(np.asarray(dur, np.int64), (n,))[launch].copy(),
                fn_codes(self.s, n, name)[launch].astype(np.int32),
                (np.full(n, -1) if kernel is None else arg_codes(self.s, kernel, n))[launch].astype(np.int32),
                self.s.codes(_arg(args, "py"), n)[launch].astype(np.int32)))

    def group_slices(self, ts, dur, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        self._seen(ts)  # GPU work: none of the sched checks read it, but it is in the trace's bounds

    # -- trace_processor's tables
    def _columns(self):
        """Switches as trace_processor keeps them (each CPU's first one dropped), per CPU in time order;
        the wakings it keeps; the forks. None when declined."""
        if self._cols is None:
            self._cols = False if self.declined or not self.sw else self._work_out()
        return self._cols or None

    def _work_out(self):
        cpu, ts, prev, nxt, state, bundle = (np.concatenate(c) for c in zip(*self.sw))
        o = np.argsort(cpu, kind="stable")  # (a radix sort) each CPU's blocks come in time order...
        cpu, ts = cpu[o], ts[o]
        if ((np.diff(ts) < 0) & (cpu[1:] == cpu[:-1])).any():  # ... else: stable, equal times keep their order
            o2 = np.lexsort((ts, cpu))
            o, cpu, ts = o[o2], cpu[o2], ts[o2]
        prev, nxt, state, bundle = prev[o], nxt[o], state[o], bundle[o]
        first = np.r_[True, cpu[1:] != cpu[:-1]]
        keep = ~first
        sw = {"cpu": cpu[keep], "ts": ts[keep], "prev": prev[keep], "next": nxt[keep], "state": state[keep]}
        wk = {k: np.zeros(0, np.int64) for k in ("cpu", "ts", "waker", "woken", "tie")}
        if self.wk:
            wcpu, wts, _, woken, wbundle = (np.concatenate(c) for c in zip(*self.wk))
            # A compact waking names no waker: trace_processor takes the task its CPU last switched to
            # (the dropped first switch included), and skips the wakings before that first switch. At one
            # time, a bundle's switches come before its wakings (its order); else their order is unknown.
            o = np.argsort(wcpu, kind="stable")
            wcpu, wts, woken, wbundle = wcpu[o], wts[o], woken[o], wbundle[o]
            waker, k, tie = np.zeros(wts.size, np.int64), np.zeros(wts.size, bool), np.zeros(wts.size, bool)
            lo_w = np.searchsorted(wcpu, np.unique(wcpu))
            for c, a in zip(np.unique(wcpu).tolist(), lo_w.tolist()):
                b = int(np.searchsorted(wcpu, c, "right"))
                lo, hi = int(np.searchsorted(cpu, c)), int(np.searchsorted(cpu, c, "right"))
                if lo == hi:
                    continue  # no switch on that CPU: all skipped
                t = wts[a:b]
                at = lo + np.searchsorted(ts[lo:hi], t, "right") - 1
                k[a:b] = t >= ts[lo]
                waker[a:b] = nxt[np.maximum(at, lo)]
                same = lo + np.searchsorted(ts[lo:hi], t, "left")  # the first switch at the waking's time
                j = np.minimum(same, hi - 1)
                # switches at its time from another bundle than its own (both ends of the run checked)
                tie[a:b] = (same <= at) & ((bundle[j] != wbundle[a:b]) | (bundle[np.maximum(at, lo)] != wbundle[a:b]))
            wk = {"cpu": wcpu[k], "ts": wts[k], "waker": waker[k], "woken": woken[k], "tie": tie[k]}
        fk = ([np.concatenate(c) for c in zip(*self.forks)] if self.forks else
              [np.zeros(0, np.int64)] * 3)
        return sw, wk, {"ts": fk[0], "parent": fk[1], "child": fk[2]}

    def sched_slices(self):
        if self._sched is None:
            cols = self._columns()
            if cols is None:
                self._sched = False
            else:
                sw = cols[0]
                cpu, ts = sw["cpu"].astype(np.int64), sw["ts"]
                last = np.r_[cpu[1:] != cpu[:-1], True] if cpu.size else np.zeros(0, bool)
                dur = np.where(last, -1, np.r_[ts[1:], 0] - ts)
                self._sched = {"cpu": cpu, "ts": ts, "dur": dur, "tid": sw["next"].astype(np.int64)}
        return self._sched or None

    def run_ns(self, tid: int) -> int:
        s = self.sched_slices()
        return 0 if s is None else int(s["dur"][s["tid"] == tid].sum())

    def thread_states(self, tid: int):
        if tid not in self._states:
            self._states[tid] = self._thread_states(int(tid))
        return self._states[tid]

    def _thread_states(self, tid: int):
        cols = self._columns()
        if cols is None:
            return None
        sw, wk, fk = cols
        if tid == IDLE_TID:
            return {"ts": np.zeros(0, np.int64), "dur": np.zeros(0, np.int64), "waker": np.zeros(0, np.int64),
                    "state": np.zeros(0, object)}
        o, i = np.flatnonzero(sw["prev"] == tid), np.flatnonzero(sw["next"] == tid)
        w, f = np.flatnonzero(wk["woken"] == tid), np.flatnonzero(fk["child"] == tid)
        n_sw = sw["ts"].size
        # an event: (ts, order among switches (one CPU's run of switches stays in its order), kind, arg)
        ev_ts = np.r_[sw["ts"][o], sw["ts"][i], wk["ts"][w], fk["ts"][f]]
        seq = np.r_[o, i, np.full(w.size + f.size, n_sw)]
        kind = np.r_[np.full(o.size, _OUT), np.full(i.size, _IN), np.full(w.size, _WAKE), np.full(f.size, _NEW)]
        arg = np.r_[sw["state"][o], np.zeros(i.size, np.int64), wk["waker"][w], fk["parent"][f]].astype(np.int64)
        src = np.r_[sw["cpu"][o], sw["cpu"][i], wk["cpu"][w], np.full(f.size, -1)].astype(np.int64)
        order = np.lexsort((seq, ev_ts))
        ev_ts, kind, arg, src = ev_ts[order], kind[order], arg[order], src[order]
        same = ev_ts[1:] == ev_ts[:-1]
        if wk["tie"][w].any() or (same & ((src[1:] < 0) | (src[1:] != src[:-1]))).any():
            return None  # two events of the thread at one time, not on one CPU (its switches, then its wakings)
        if f.size > 1 or (f.size and (ev_ts[0] != fk["ts"][f[0]] or kind[0] != _NEW)):
            return None  # forked twice, or ran before its fork: trace_processor makes two threads of it
        return _replay(ev_ts, kind, arg)

    def start_bounds(self):
        """(lo, hi) around trace_start() (the module doc), or None."""
        s = self.sched_slices()
        if s is None or self.log_start is None:
            return None
        first = int(s["ts"].min()) if s["ts"].size else self.log_start
        if self.first_event is not None:  # an event written before them (the recorder's "library attached"
            first = min(first, self.first_event)  # instants come from before the log's first record)
        return min(self.log_start, first), first

    # -- the prelude's picks
    def _name(self, tid: int) -> str:
        t = self.model.threads.get(tid) if self.model is not None else None
        return t.name if t is not None and t.name else ""

    def main_thread(self):
        """tl_main_thread: rule 1, the longest marker (ties: the earliest, then the lowest tid); rule 2,
        the most launches (ties: the thread that launched first); else not modelled."""
        self.main_declined = ""
        tid, why = None, ""
        if self.marks:
            picked = marked_main(self.marks)
            if picked is None:
                self.main_declined = "two markers alike but for their process (the SQL's row order picks)"
                return None
            tid, why = picked[0], "marked as the main training thread by the recorder"
        elif self.launch:
            ts, t = (np.concatenate([c[k] for c in self.launch]) for k in (0, 1))
            tids, cnt = np.unique(t, return_counts=True)
            top = tids[cnt == cnt.max()].tolist()
            first = {int(x): int(ts[t == x].min()) for x in top}
            early = min(first.values())
            if sum(v == early for v in first.values()) > 1:
                self.main_declined = "two threads with the most kernel launches, first launching at once"
                return None
            tid, why = next(x for x, v in first.items() if v == early), "issues the most kernel launches"
        else:
            s = self.sched_slices()
            if s is None or np.isin(s["tid"], [IDLE_TID, OUTSIDE_TID], invert=True).any():
                self.main_declined = "no marker and no kernel launch (the training process' rules: not modelled)"
            return None  # else no process has scheduled threads: no main thread, certainly
        name = self._name(tid)
        if not name or self.declined:
            self.main_declined = self.declined or "a main thread with no name"
            return None
        pid = self.pid_of(tid)
        return {"tid": tid, "pid": pid if pid is not None else tid, "name": name, "why": why}

    def _launches_of(self) -> dict:
        if not self.launch:
            return {}
        t = np.concatenate([c[1] for c in self.launch])
        tids, cnt = np.unique(t, return_counts=True)
        return dict(zip(tids.tolist(), cnt.tolist()))

    def backward_thread(self, main: dict):
        """tl_backward_thread: the main process' pt_autograd_* thread with the most launches, then
        the most run time; None on a tie (the SQL takes its first)."""
        if self.model is None:
            return None
        cands = [t.tid for t in self.model.threads.values()
                 if t.tid != main["tid"] and t.name and fnmatch.fnmatchcase(t.name, "pt_autograd_*")
                 and self.pid_of(t.tid) == main["pid"]]
        if not cands:
            return False
        launches = self._launches_of()
        keyed = sorted(((launches.get(t, 0), self.run_ns(t)), t) for t in cands)
        if len(keyed) > 1 and keyed[-1][0] == keyed[-2][0]:
            return None
        tid = keyed[-1][1]
        return {"tid": tid, "name": self._name(tid)}

    def steady(self, main: dict):
        """tl_steady of the main process: (the end of its start-up, or its first CUDA call; its last
        CUDA call's end), False when it made none."""
        span = self.cuda.get(main["pid"])
        if span is None:
            return False
        end = None
        if self.launch:
            ts, _, pid, key = (np.concatenate(c) for c in zip(*self.launch))
            m = pid == main["pid"]
            end = startup_ends(ts[m], pid[m], key[m]).get(main["pid"]) if m.any() else None
        return (end if end is not None else span[0], span[1])

