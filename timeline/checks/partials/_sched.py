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

How trace_processor turns the switches into states (checked row for row by tests/unit/
test_sched_partials.py): each CPU's first switch is dropped (it has no prev), with the wakings on
that CPU up to its time; a switch closes the prev thread's open state (unless that state was not
Running: lost data, the old row stays open, dur -1) and opens the prev_state one, then closes the
next thread's and opens Running; a waking of a thread with no row opens R; of a thread that is
Running or R it is ignored; else it closes the open state and opens R (so an R+ thread woken becomes
R); a fork opens R for the child (waker: the parent) without closing anything; the idle task gets no
row. Where a thread has two events at one time that are not switches on one CPU (trace_processor
orders them as its sorter likes), a tid that was forked twice or ran before its fork (two utids),
or a recording above MAX_ROWS, the answer is None and the checks run through trace_processor.
"""
from __future__ import annotations

import fnmatch

import numpy as np

from ... import proc_records
from ...converters.interface import Column
from ...converters.model import IDLE_TID
from ._gpu import (CUDA_CATS, MAIN_CAT, MAIN_MARK, MAX_ROWS, _arg, _Strings, arg_codes, launch_fns, launch_keys,
                   startup_ends)

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
        self.marks: list[tuple] = []  # the recorder's main-thread markers: dur, tid
        self.rows = 0
        self.declined = ""
        self.main_declined = ""
        self._cols = None
        self._states: dict = {}
        self._sched = None

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
            if c.sw_ts.size:
                self.sw.append((np.full(c.sw_ts.size, c.cpu, np.int32), c.sw_ts.astype(np.int64),
                                c.sw_prev.astype(np.int32), c.sw_next.astype(np.int32),
                                c.sw_state.astype(np.int32)))
            if c.wk_ts.size:
                self.wk.append((np.full(c.wk_ts.size, c.cpu, np.int32), c.wk_ts.astype(np.int64),
                                c.wk_waker.astype(np.int32), c.wk_woken.astype(np.int32)))

    def proc(self, recs: np.ndarray) -> None:
        f = recs[recs["kind"] == proc_records.PROC_FORK]
        if f.size and self._hold(f.size):
            self.forks.append((f["ts"].astype(np.int64), f["tid"].astype(np.int32), f["child_tid"].astype(np.int32)))

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None) -> None:
        if cat == MAIN_CAT and name == MAIN_MARK:
            self.marks.append((int(dur), int(tid)))
        if cat in CUDA_CATS:
            self.slices([ts], [dur], [tid], None if pid is None else [pid], name, cat, [
                Column(k, "str", np.zeros(1, np.int64), [str(v)]) for k, v in (args or {}).items() if v is not None])
        elif not self.declined and self._hold(1):
            self.spans.append((np.array([tid], np.int32), np.array([ts], np.int64), np.array([ts + max(dur, 0)], np.int64)))

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        ts = np.asarray(ts, np.int64).reshape(-1)
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
                launch_fns(self.s, n, name)[launch].astype(np.int32),
                (np.full(n, -1) if kernel is None else arg_codes(self.s, kernel, n))[launch].astype(np.int32),
                self.s.codes(_arg(args, "py"), n)[launch].astype(np.int32)))

    def group_slices(self, ts, dur, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        pass  # GPU work: none of the sched checks read it

    # -- trace_processor's tables
    def _columns(self):
        """Switches as trace_processor keeps them (each CPU's first one dropped), per CPU in time order;
        the wakings it keeps; the forks. None when declined."""
        if self._cols is None:
            self._cols = False if self.declined or not self.sw else self._work_out()
        return self._cols or None

    def _work_out(self):
        cpu, ts, prev, nxt, state = (np.concatenate(c) for c in zip(*self.sw))
        o = np.lexsort((ts, cpu))  # stable: equal times on a CPU keep the stream's order
        cpu, ts, prev, nxt, state = cpu[o], ts[o], prev[o], nxt[o], state[o]
        first = np.r_[True, cpu[1:] != cpu[:-1]]
        keep = ~first
        sw = {"cpu": cpu[keep], "ts": ts[keep], "prev": prev[keep], "next": nxt[keep], "state": state[keep]}
        wk = {k: np.zeros(0, np.int64) for k in ("cpu", "ts", "waker", "woken", "tie")}
        if self.wk:
            wcpu, wts, _, woken = (np.concatenate(c) for c in zip(*self.wk))
            # A compact waking names no waker: trace_processor takes the task its CPU last switched to
            # (the dropped first switch included), and skips the wakings up to that first switch.
            o = np.argsort(wcpu, kind="stable")
            wcpu, wts, woken = wcpu[o], wts[o], woken[o]
            waker, k, tie = np.zeros(wts.size, np.int64), np.zeros(wts.size, bool), np.zeros(wts.size, bool)
            lo_w = np.searchsorted(wcpu, np.unique(wcpu))
            for c, a in zip(np.unique(wcpu).tolist(), lo_w.tolist()):
                b = int(np.searchsorted(wcpu, c, "right"))
                lo, hi = int(np.searchsorted(cpu, c)), int(np.searchsorted(cpu, c, "right"))
                if lo == hi:
                    continue  # no switch on that CPU: all skipped
                t = wts[a:b]
                at = lo + np.searchsorted(ts[lo:hi], t, "right") - 1
                k[a:b] = t > ts[lo]
                waker[a:b] = nxt[np.maximum(at, lo)]
                tie[a:b] = lo + np.searchsorted(ts[lo:hi], t, "left") <= at  # a switch then: order unknown
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
        src = np.r_[sw["cpu"][o], sw["cpu"][i], np.full(w.size + f.size, -1)].astype(np.int64)
        order = np.lexsort((seq, ev_ts))
        ev_ts, kind, arg, src = ev_ts[order], kind[order], arg[order], src[order]
        same = ev_ts[1:] == ev_ts[:-1]
        if wk["tie"][w].any() or (same & ((src[1:] < 0) | (src[1:] != src[:-1]))).any():
            return None  # two events of the thread at one time, not one CPU's switches: the sorter decides
        if f.size > 1 or (f.size and (ev_ts[0] != fk["ts"][f[0]] or kind[0] != _NEW)):
            return None  # forked twice, or ran before its fork: trace_processor makes two threads of it
        rts, rdur, rstate, rwaker = [], [], [], []
        last = None  # the state of the thread's latest row (trace_processor's last_row)
        for t, k, a in zip(ev_ts.tolist(), kind.tolist(), arg.tolist()):
            if k == _WAKE and last is not None and last in ("R", "Running"):
                continue
            close = last is not None and not (k == _NEW or (k == _OUT and last != "Running"))
            if close:
                rdur[-1] = t - rts[-1]
            st = "Running" if k == _IN else "R" if k in (_WAKE, _NEW) else state_name(a)
            rts.append(t)
            rdur.append(-1)
            rstate.append(st)
            rwaker.append(a if k in (_WAKE, _NEW) else -1)
            last = st
        return {"ts": np.array(rts, np.int64), "dur": np.array(rdur, np.int64),
                "waker": np.array(rwaker, np.int64), "state": np.array(rstate, object)}

    # -- the prelude's picks
    def _name(self, tid: int) -> str:
        t = self.model.threads.get(tid) if self.model is not None else None
        return t.name if t is not None and t.name else ""

    def main_thread(self):
        """tl_main_thread: rule 1, the longest marker; rule 2, the most launches; else not modelled."""
        self.main_declined = ""
        tid, why = None, ""
        if self.marks:
            longest = max(d for d, _ in self.marks)
            tids = {t for d, t in self.marks if d == longest}
            if len(tids) > 1:
                self.main_declined = "two threads marked as the main training thread, equally long"
                return None
            tid, why = tids.pop(), "marked as the main training thread by the recorder"
        elif self.launch:
            t = np.concatenate([c[1] for c in self.launch])
            tids, cnt = np.unique(t, return_counts=True)
            top = tids[cnt == cnt.max()]
            if top.size > 1:
                self.main_declined = "two threads with the most kernel launches"
                return None
            tid, why = int(top[0]), "issues the most kernel launches"
        else:
            self.main_declined = "no marker and no kernel launch (the training process' rules: not modelled)"
            return None
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

