"""The CUDA-call checks' inputs (cuda_errors, cuda_graphs, alloc_churn): the prelude's _tl_cuda (thread
slices of the categories cuda, cuda_driver and nccl), read from the converter's slice batches once, for
the whole recording (no call is cut at a chunk boundary here, so each is counted once, where it began).

Held: per-key counts, first starts and last ends, accumulated as batches come; the few calls whose
duration the checks print (failed calls), for checking that trace_processor gives them the duration
the converter wrote (`nested` with _sched.py's thread spans).
"""
from __future__ import annotations

import numpy as np

from ._gpu import CUDA_CATS, _arg, _Strings, fn_codes

NOT_READY_FNS = ("cudaStreamQuery", "cudaEventQuery", "cuStreamQuery", "cuEventQuery")
MAX_HELD = 200_000  # failed calls, graph set-up calls held (ts, dur, tid) for the nesting check
MAX_EXECS = 100_000  # (process, graph exec handle) pairs counted


class CudaCalls:
    """Aggregates of the CUDA/NCCL calls (one instance feeds every check naming this class)."""

    def __init__(self, pid_of=None):
        self.s = _Strings()
        self.pid_of = pid_of or (lambda tid: tid)
        self.model = None
        self.log_start = None
        self.seen = 0            # CUDA calls seen
        self.with_ret = 0        # of them with a ret arg
        self.nonzero = 0         # ... and ret != 0 ("not ready" polling included: the SQL's not_ready)
        self.err: dict[tuple, list] = {}  # (cat code, ret, fn code, tid) -> [calls, first ts, last end]
        self.err_rows: list[tuple] = []   # failed calls: ts, dur, tid
        self.held = 0
        self.declined = ""
        self.graph_kind: dict[int, tuple] = {}  # fn code -> (is_capture, is_inst, is_launch, is_setup), or ()
        self.graph: dict[int, list] = {}  # pid -> [captures, inst, launches, setup ns, first inst, last inst end]
        self.execs: dict[tuple, int] = {}  # (pid, is_inst, exec) -> calls
        self.setup_rows: list[tuple] = []  # graph set-up calls: ts, dur, tid

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None) -> None:
        if cat not in CUDA_CATS:
            return  # the per-event path carries no CUDA call; kept for completeness
        from ...converters.interface import Column
        cols = [Column(k, "int" if isinstance(v, int) else "str",
                       np.array([v if isinstance(v, int) else 0], np.int64), None if isinstance(v, int) else [str(v)])
                for k, v in (args or {}).items() if v is not None]
        self.slices([ts], [dur], [tid], None if pid is None else [pid], name, cat, cols)

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        ts = np.asarray(ts, np.int64).reshape(-1)
        n = ts.size
        if not n:
            return
        cats = self.s.codes(cat, n)
        cuda = np.isin(cats, [self.s.code(c) for c in CUDA_CATS])
        if not cuda.any():
            return
        self.seen += int(cuda.sum())
        dur = np.maximum(np.broadcast_to(np.asarray(dur, np.int64), (n,)), 0)  # the sink ends it at ts + max(dur, 0)
        tid = np.broadcast_to(np.asarray(tid, np.int64), (n,))
        fn = fn_codes(self.s, n, name)
        self._errors(ts, dur, tid, cats, cuda, n, fn, args)
        self._graphs(ts, dur, tid, pid, cuda, n, fn, args)

    def _hold(self, k: int) -> bool:
        self.held += k
        if self.held > MAX_HELD and not self.declined:
            self.declined, self.err_rows, self.setup_rows = f"more than {MAX_HELD:,} calls held", [], []
        return not self.declined

    def _graph_kind(self, code: int) -> tuple:
        """cuda_graphs' _tl_cg_calls of one fn: () where it is not read, else its four flags (the globs)."""
        k = self.graph_kind.get(code)
        if k is None:
            f = self.s.strings[code] if code >= 0 else ""
            t = f[2:] if f.startswith("cu") else None  # glob 'cu*X*': X after the leading "cu"
            if t is None or ("Capture" not in t and "Graph" not in t):
                k = ()
            else:
                cap, inst = "StreamBeginCapture" in t, "GraphInstantiate" in t
                k = (cap, inst, f in ("cudaGraphLaunch", "cuGraphLaunch"), cap or inst or "StreamEndCapture" in t)
            self.graph_kind[code] = k
        return k

    def _graphs(self, ts, dur, tid, pid, cuda, n, fn, args) -> None:
        """cuda_graphs' _tl_cg_part: per process its captures, instantiations, launches and set-up time;
        per (process, exec handle) the instantiations and launches."""
        uniq = np.unique(fn[cuda]).tolist()
        kinds = {c: self._graph_kind(c) for c in uniq}
        read = [c for c in uniq if kinds[c]]
        if not read:
            return
        k = np.flatnonzero(cuda & np.isin(fn, read))
        pids = (np.broadcast_to(np.asarray(pid, np.int64), (n,))[k] if pid is not None else
                np.array([-1 if (p := self.pid_of(t)) is None else p for t in tid[k].tolist()], np.int64))
        if (pids < 0).any():
            self.declined = "a graph call of a thread without a process"
            return
        exv = _values(_arg(args, "exec"), k)
        for i, p in zip(k.tolist(), pids.tolist()):  # graph calls: a few per step at most
            cap, inst, launch, setup = kinds[int(fn[i])]
            g = self.graph.setdefault(p, [0, 0, 0, 0, None, None])
            g[0] += cap
            g[1] += inst
            g[2] += launch
            if setup:
                g[3] += int(dur[i])
                if self._hold(1):
                    self.setup_rows.append((ts[i:i + 1], dur[i:i + 1], tid[i:i + 1].copy()))
            if inst:
                t0, t1 = int(ts[i]), int(ts[i] + dur[i])
                g[4] = t0 if g[4] is None else min(g[4], t0)
                g[5] = t1 if g[5] is None else max(g[5], t1)
            if (inst or launch) and exv.get(i) is not None:
                key = (p, inst, exv[i])
                self.execs[key] = self.execs.get(key, 0) + 1
                if len(self.execs) > MAX_EXECS:
                    self.declined = f"more than {MAX_EXECS:,} graph handles"

    def _errors(self, ts, dur, tid, cats, cuda, n, fn, args) -> None:
        """cuda_errors' _tl_ce_part: the 'all' row's counts; per (category, ret, fn, thread) the failed calls."""
        c = _arg(args, "ret")
        if c is None or c.kind != "int":
            if c is not None:
                self.declined = "a ret arg that is not an integer"
            return
        vals = np.asarray(c.values).astype(np.int64)
        has = cuda & (np.ones(n, bool) if c.present is None else np.asarray(c.present, bool))
        self.with_ret += int(has.sum())
        bad = has & (vals != 0)
        self.nonzero += int(bad.sum())
        if not bad.any():
            return
        ready = np.isin(fn, [self.s.code(f) for f in NOT_READY_FNS])
        bad &= ~((vals == 600) & ready)
        if not bad.any():
            return
        k = np.flatnonzero(bad)
        if self._hold(k.size):
            self.err_rows.append((ts[k], dur[k], tid[k].copy()))
        keys = np.stack([cats[k], vals[k], fn[k], tid[k]], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        cnt = np.bincount(inv)
        first = np.full(uniq.shape[0], np.iinfo(np.int64).max)
        np.minimum.at(first, inv, ts[k])
        last = np.full(uniq.shape[0], np.iinfo(np.int64).min)
        np.maximum.at(last, inv, ts[k] + dur[k])
        for key, m, f, e in zip(map(tuple, uniq.tolist()), cnt.tolist(), first.tolist(), last.tolist()):
            have = self.err.get(key)
            if have is None:
                self.err[key] = [m, f, e]
            else:
                have[0] += m
                have[1], have[2] = min(have[1], f), max(have[2], e)

    def group_slices(self, ts, dur, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        pass  # GPU work: not a CUDA call

    def thread_name(self, tid: int):
        """thread.name as the converter names it (None: unknown)."""
        t = self.model.threads.get(tid) if self.model is not None else None
        return t.name if t is not None else None

    def process_name(self, pid: int):
        """_tl_pname.name: the leader thread's name (None: not known to the converter, so not certain)."""
        return self.thread_name(pid)


def _values(c, rows: np.ndarray) -> dict:
    """row -> an arg's value as trace_processor keeps it (a hex number as its '0x...' string), of `rows`
    where present."""
    if c is None:
        return {}
    keep = rows if c.present is None else rows[np.asarray(c.present, bool)[rows]]
    vals = np.asarray(c.values)[keep].tolist()
    if c.kind == "hex":
        vals = [f"{v:#x}" for v in vals]
    elif c.kind == "str":
        vals = [c.strings[v] for v in vals]
    return dict(zip(keep.tolist(), vals))


def nested(sched, rows: list[tuple]) -> bool:
    """Whether trace_processor gives each of `rows` (ts, dur, tid batches) the duration written (_sched.py's
    spans of every other thread slice; launch_latency's check)."""
    from .launch_latency import _nested_as_written
    if sched.declined:
        return False
    if not rows:
        return True
    ts, dur, tid = (np.concatenate(c) for c in zip(*rows))
    return _nested_as_written(sched, ts, tid, dur, np.ones(ts.size, bool))


def reduce(check_id: str, params: dict, rows: list) -> list[dict]:
    """The check's reduce SQL (below its @reduce line) run in SQLite on its map table's rows."""
    from ..catalog import BY_ID
    from ..runner import render_sql
    from ..traceset import reduce_rows, split_sql
    _, table, sql = split_sql(render_sql(BY_ID[check_id], params))
    return reduce_rows(sql, table, COLUMNS[check_id], [tuple(r) for r in rows])


COLUMNS = {
    "cuda_errors": ["kind", "category", "ret", "fn", "tid", "thread", "calls", "first_ts", "last_end", "with_ret",
                    "not_ready"],
    "cuda_graphs": ["kind", "pid", "name", "captures", "inst", "launches", "setup", "first_inst", "last_inst", "exec"],
}
