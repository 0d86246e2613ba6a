"""The CUDA-call checks' inputs (cuda_errors, cuda_graphs, alloc_churn): the prelude's _tl_cuda (thread
slices of the categories cuda, cuda_driver and nccl), read from the converter's slice batches once, for
the whole recording (no call is cut at a chunk boundary here, so each is counted once, where it began).

Held: per-key counts, sums, first starts and last ends, accumulated as batches come; the calls whose
duration the checks print (failed calls, graph set-up calls, malloc/free/OOM calls: MAX_HELD in all, as
ts, dur, tid) for checking that trace_processor gives them the duration the converter wrote (`nested`,
with _sched.py's spans of every thread slice); the malloc durations (alloc_churn's percentiles); the
cuda.allocated_bytes samples (the value at a process' first OOM; MAX_SAMPLES).
"""
from __future__ import annotations

import numpy as np

from ._gpu import CUDA_CATS, _arg, _Strings, fn_codes
from ._reduce import reduced

NOT_READY_FNS = ("cudaStreamQuery", "cudaEventQuery", "cuStreamQuery", "cuEventQuery")
MAX_HELD = 1_000_000  # failed calls, graph set-up calls held (ts, dur, tid) for the nesting check
MAX_EXECS = 100_000  # (process, graph exec handle) pairs counted
MAX_SAMPLES = 5_000_000  # cuda.allocated_bytes samples held (for the value at a process' first OOM)
FREES = ("cudaFree", "cuMemFree", "cuMemFree_v2")
MALLOCS = ("cudaMalloc", "cudaMallocManaged", "cuMemAlloc", "cuMemAlloc_v2", "cuMemAllocManaged")
ALLOC_FNS = MALLOCS + FREES + ("cudaMallocAsync", "cuMemAllocAsync", "cudaFreeAsync", "cuMemFreeAsync")
MEM_COUNTER = ("cuda.allocated_bytes", "cuda.allocated_bytes value")


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
        # alloc_churn
        self.span: dict[int, list] = {}   # pid -> [first CUDA call ts, last CUDA call end]
        self.thread_span: dict[int, list] = {}  # tid -> [first ts, last end, first start of a call ending last]
        self.ac: dict[int, list] = {}     # pid -> [mallocs, frees, ns inside them]
        self.malloc_durs: dict[int, list] = {}  # pid -> malloc durations (arrays)
        self.ac_rows: list[tuple] = []    # malloc/free/OOM calls: ts, dur, tid (the nesting check)
        self.oom: dict[int, list] = {}    # pid -> [n, first ts, last end, first's size, first's fn, tie at first]
        self.mem: dict[int, list] = {}    # pid -> [(ts, values) arrays] of cuda.allocated_bytes
        self.peak: dict[int, float] = {}
        self.samples = 0

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
        self._allocs(ts, dur, tid, pid, cuda, n, fn, args)

    def _pids(self, tid: np.ndarray, pid, rows: np.ndarray) -> np.ndarray:
        """The process of each of `rows` (-1: none known)."""
        if pid is not None:
            return np.broadcast_to(np.asarray(pid, np.int64), tid.shape)[rows]
        uniq, inv = np.unique(tid[rows], return_inverse=True)
        return np.array([-1 if (p := self.pid_of(t)) is None else p for t in uniq.tolist()],
                        np.int64)[inv.reshape(-1)]

    def _allocs(self, ts, dur, tid, pid, cuda, n, fn, args) -> None:
        """alloc_churn's inputs: each process' CUDA span (_tl_ac_span) and each thread's (for the nesting
        check), its malloc/free counts and time, malloc durations, OOM returns (_tl_ac, _tl_ac_oom)."""
        k = np.flatnonzero(cuda)
        end = ts + dur
        pids = self._pids(tid, pid, k)
        for t in np.unique(tid[k]).tolist():
            m = k[tid[k] == t]
            lo, hi = int(ts[m].min()), int(end[m].max())
            so = int(ts[m][end[m] == hi].min())
            have = self.thread_span.get(t)
            if have is None:
                self.thread_span[t] = [lo, hi, so]
            else:
                have[0] = min(have[0], lo)
                if hi > have[1]:
                    have[1], have[2] = hi, so
                elif hi == have[1]:
                    have[2] = min(have[2], so)
        for p in np.unique(pids).tolist():
            m = k[pids == p]
            lo, hi = int(ts[m].min()), int(end[m].max())
            have = self.span.setdefault(p, [lo, hi])
            have[0], have[1] = min(have[0], lo), max(have[1], hi)
        ac = np.isin(fn[k], [self.s.code(f) for f in ALLOC_FNS])
        if not ac.any():
            return
        k, pids = k[ac], pids[ac]
        if (pids < 0).any():
            self.declined = "an allocation of a thread without a process"
            return
        is_malloc = np.isin(fn[k], [self.s.code(f) for f in MALLOCS])
        is_free = np.isin(fn[k], [self.s.code(f) for f in FREES])
        c = _arg(args, "ret")
        ret = np.asarray(c.values).astype(np.int64)[k] if c is not None and c.kind == "int" else np.zeros(k.size, np.int64)
        if c is not None and c.present is not None:
            ret = np.where(np.asarray(c.present, bool)[k], ret, 0)
        timed = k[is_malloc | is_free | (ret == 2)]  # the calls whose durations the check prints (not the async ones)
        if not self._hold(timed.size):
            return
        self.ac_rows.append((ts[timed], dur[timed], tid[timed].copy()))
        sizes = _values(_arg(args, "size"), k)
        for p in np.unique(pids).tolist():
            m = pids == p
            a = self.ac.setdefault(p, [0, 0, 0])
            a[0] += int(is_malloc[m].sum())
            a[1] += int(is_free[m].sum())
            a[2] += int(dur[k][m & (is_malloc | is_free)].sum())
            if (m & is_malloc).any():
                self.malloc_durs.setdefault(p, []).append(dur[k][m & is_malloc])
            o = np.flatnonzero(m & (ret == 2))
            if not o.size:
                continue
            rows = k[o]
            first = int(ts[rows].min())
            at = rows[ts[rows] == first]
            firsts = {(sizes.get(i), self.s.strings[int(fn[i])]) for i in at.tolist()}
            b = self.oom.get(p)
            if b is None:
                b = self.oom[p] = [0, first, first, None, None, False]
            b[0] += o.size
            b[2] = max(b[2], int(end[rows].max()))
            if first < b[1] or b[3] is None:
                b[1], (b[3], b[4]), b[5] = first, next(iter(firsts)), len(firsts) > 1
            elif first == b[1]:
                b[5] = b[5] or len(firsts | {(b[3], b[4])}) > 1

    def counters(self, name, ts, values, pid=None) -> None:
        """A process' cuda.allocated_bytes (alloc_churn's _tl_ac_mem): its peak, its samples held."""
        if name not in MEM_COUNTER or pid is None:
            return
        ts = np.asarray(ts, np.int64).reshape(-1)
        if not ts.size:
            return
        v = np.asarray(values, np.float64).reshape(-1)
        self.peak[int(pid)] = max(self.peak.get(int(pid), -np.inf), float(v.max()))
        self.samples += ts.size
        if self.samples <= MAX_SAMPLES:
            self.mem.setdefault(int(pid), []).append((ts, v))
        else:
            self.mem = {}

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


def spans_as_written(sched, thread_span: dict) -> bool:
    """Whether trace_processor gives each thread's CUDA calls the last end written (so _tl_ac_span's): no
    other thread slice starting inside the thread's CUDA activity ends after its last call (it could take
    over a call's end), none started before the outermost last call ends inside it (it would take the
    call's end). Each call's end in trace_processor is then at most the last, and the outermost last
    call closes at it."""
    if sched.declined:
        return False
    parts = list(sched.spans)
    if sched.launch:  # launches are not among the spans: their start and duration
        parts.append((np.concatenate([x[1] for x in sched.launch]), np.concatenate([x[0] for x in sched.launch]),
                      np.concatenate([x[0] for x in sched.launch]) + np.maximum(
                          np.concatenate([x[0] for x in sched.launch_more]), 0)))
    if not parts or not thread_span:
        return True
    s_tid, s_ts, s_end = (np.concatenate([np.asarray(x[i], np.int64) for x in parts]) for i in range(3))
    tids = np.array(sorted(thread_span), np.int64)
    lo, hi, so = (np.array([thread_span[t][j] for t in tids.tolist()], np.int64) for j in range(3))
    at = np.searchsorted(tids, s_tid)
    mine = (at < tids.size) & (tids[np.minimum(at, tids.size - 1)] == s_tid)
    at = np.minimum(at, tids.size - 1)
    after = mine & (s_ts >= lo[at]) & (s_ts <= hi[at]) & (s_end > hi[at])
    into = mine & (s_ts < so[at]) & (s_end >= so[at]) & (s_end < hi[at])
    return not (after | into).any()


def at_or_before(samples: list, t: int):
    """The value of the latest sample at or before t (None: none; False: two at that time disagree)."""
    if not samples:
        return None
    ts, v = (np.concatenate(x) for x in zip(*samples))
    m = ts <= t
    if not m.any():
        return None
    last = ts[m].max()
    vals = np.unique(v[m & (ts == last)])
    return float(vals[0]) if vals.size == 1 else False


def reduce(check_id: str, params: dict, rows: list) -> list[dict]:
    """The check's reduce SQL (below its @reduce line) run in SQLite on its map table's rows."""
    return reduced(check_id, params, COLUMNS[check_id], rows)


COLUMNS = {
    "cuda_errors": ["kind", "category", "ret", "fn", "tid", "thread", "calls", "first_ts", "last_end", "with_ret",
                    "not_ready"],
    "alloc_churn": {"_tl_ac": ["upid", "ts", "span", "mallocs", "frees", "inside", "p50", "p99"],
                    "_tl_ac_oom": ["upid", "n", "first_ts", "dur", "size", "fn"],
                    "_tl_ac_mem": ["upid", "peak", "at_oom"],
                    "_tl_pname": ["upid", "pid", "name"]},
    "cuda_graphs": ["kind", "pid", "name", "captures", "inst", "launches", "setup", "first_inst", "last_inst", "exec"],
}
