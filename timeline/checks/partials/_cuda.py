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
MAX_HELD = 200_000  # failed calls held (ts, dur, tid) for the nesting check


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
        self._errors(ts, dur, tid, cats, cuda, n, name, args)

    def _errors(self, ts, dur, tid, cats, cuda, n, name, args) -> None:
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
        fn = fn_codes(self.s, n, name)
        ready = np.isin(fn, [self.s.code(f) for f in NOT_READY_FNS])
        bad &= ~((vals == 600) & ready)
        if not bad.any():
            return
        k = np.flatnonzero(bad)
        self.held += k.size
        if self.held > MAX_HELD:
            self.declined, self.err_rows = f"more than {MAX_HELD:,} failed calls", []
        if not self.declined:
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
}
