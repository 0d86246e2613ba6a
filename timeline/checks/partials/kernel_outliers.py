"""kernel_outliers (sql/kernel_outliers.sql) as a partial computed at conversion.

What the SQL reads, taken from the converter's slice batches:
- GPU work (categories gpu_kernel/gpu_memcpy/gpu_memset, dur > 0): ts, dur, name, device, flow id in;
- the calls with a flow out (their thread, process, ts and `py` arg): who owns each device and, for
  the `launched from` line, where a kernel came from;
- the kernel launches (their process, ts and kernel): each process' start-up (tl_startup).

The steady state of a device (tl_gpu_window) and each kernel's median depend on the whole recording,
so they are computed once, at the end of the conversion, over every chunk: the set part holds per
kernel name n, p50, p99 and max (nearest rank, exact). Each chunk's part holds, per kernel name, its
outliers under those medians: how many, the first start and last end, the Python lines they came
from, and the longest max_outliers of them. Bounded: kernel names x (max_outliers + lines).

Where the SQL's answer hangs on something this does not model, no partial is written and the check
runs through trace_processor: a device no flow reaches (its owner is then the main thread, chosen by
the prelude's rules), a tie between two processes' threads for a device's owner (the SQL breaks it
by trace_processor's utid order), a flow id with two sources or two ends, more kernel names than
MAX_NAMES, a recording above MAX_ROWS rows of these (their columns are held until the end).
Parameters other than the defaults the partial was made with: trace_processor too.
"""
from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from ...converters.interface import Column
from ..catalog import BY_ID

CHECK = "kernel_outliers"
VERSION = 1
GPU_CATS = ("gpu_kernel", "gpu_memcpy", "gpu_memset")
CUDA_CATS = ("cuda", "cuda_driver", "nccl")
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC",
            "cudaLaunchCooperativeKernel", "cuLaunchCooperativeKernel")
MAX_ROWS = 20_000_000   # held rows of all three kinds (16 to 33 bytes each: ~0.5 GB at most)
MAX_NAMES = 20_000      # kernel names with a median
MAX_LINES = 1_000       # Python lines per kernel name in a chunk's part


class _Strings:
    """Strings as small ints, one numbering for the whole conversion."""

    def __init__(self):
        self.ids: dict[str, int] = {}
        self.strings: list[str] = []

    def code(self, s: str) -> int:
        i = self.ids.get(s)
        if i is None:
            i = self.ids[s] = len(self.strings)
            self.strings.append(s)
        return i

    def codes(self, v, n: int) -> np.ndarray:
        """A name/cat/str arg (a str or a "str" Column) as codes per row; -1 where absent."""
        if v is None:
            return np.full(n, -1, np.int64)
        if not isinstance(v, Column):
            return np.full(n, self.code(str(v)), np.int64)
        table = np.array([self.code(str(s)) for s in v.strings] or [-1], np.int64)
        out = table[np.asarray(v.values, np.int64)] if len(v.strings) else np.full(n, -1, np.int64)
        if v.present is not None:
            out = np.where(v.present, out, -1)
        return out


def _arg(args, key: str):
    for c in args or ():
        if isinstance(c, Column) and c.key == key:
            return c
    return None


def _ids(v, n: int) -> np.ndarray:
    """Flow ids per row as an (n, k) uint64 array (0: none)."""
    a = np.asarray(v, np.uint64)
    return a.reshape(n, -1) if a.size else np.zeros((n, 0), np.uint64)


class Collector:
    def __init__(self, pid_of=None):
        self.s = _Strings()
        self.pid_of = pid_of or (lambda tid: tid)
        self.gpu: list[tuple] = []      # ts, dur, name, is a kernel, device, flow in
        self.src: list[tuple] = []      # flow id, tid, pid, py
        self.launch: list[tuple] = []   # ts, pid, kernel key
        self.rows = 0
        self.declined = ""              # why no partial (empty: none yet)

    def _hold(self, n: int) -> bool:
        self.rows += n
        if self.rows > MAX_ROWS and not self.declined:
            self.declined = f"more than {MAX_ROWS:,} rows"
            self.gpu, self.src, self.launch = [], [], []
        return not self.declined

    def _pids(self, tid: np.ndarray, pid) -> np.ndarray:
        if pid is not None:
            return np.broadcast_to(np.asarray(pid, np.int64), tid.shape).copy()
        uniq, inv = np.unique(tid, return_inverse=True)
        return np.array([p if (p := self.pid_of(t)) is not None else t for t in uniq.tolist()],
                        np.int64)[inv.reshape(-1)]

    # -- what the converter writes
    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        """A batch of thread slices (the sink's `slices`)."""
        ts = np.asarray(ts, np.int64).reshape(-1)
        n = ts.size
        if not n or self.declined:
            return
        cats = self.s.codes(cat, n)
        cuda = np.isin(cats, [self.s.code(c) for c in CUDA_CATS])
        tid = np.broadcast_to(np.asarray(tid, np.int64), (n,))
        pids = None
        if flow_out is not None:
            ids = _ids(flow_out, n)
            py = self.s.codes(_arg(args, "py"), n)
            pids = self._pids(tid, pid)
            for j in range(ids.shape[1]):
                m = ids[:, j] != 0
                if m.any() and self._hold(int(m.sum())):
                    self.src.append((ids[m, j], tid[m].astype(np.int32), pids[m].astype(np.int32),
                                     py[m].astype(np.int32)))
        names = self.s.codes(name, n)
        # the prelude's fn: the name without the per-thread-stream suffixes (worked out per distinct name)
        uniq, inv = np.unique(names, return_inverse=True)
        fn = np.array([self.s.code(self.s.strings[c].replace("_ptsz", "").replace("_ptds", "")) if c >= 0 else -1
                       for c in uniq.tolist()], np.int64)[inv.reshape(-1)]
        launch = cuda & np.isin(fn, [self.s.code(x) for x in LAUNCHES])
        if not launch.any() or not self._hold(int(launch.sum())):
            return
        key = np.full(n, -1, np.int64)  # coalesce(kernel, func, function, name): as the prelude's _tl_launch_k
        for k in ("kernel", "func", "function"):
            c = _arg(args, k)
            if c is None:
                continue
            if c.kind == "str":
                vals = self.s.codes(c, n)
            else:  # numbers: each distinct one named once
                uniq, inv = np.unique(np.asarray(c.values), return_inverse=True)
                text = [f"{v:#x}" if c.kind == "hex" else str(v) for v in uniq.tolist()]
                vals = np.array([self.s.code(f"{k}:{t}") for t in text], np.int64)[inv.reshape(-1)]
                if c.present is not None:
                    vals = np.where(c.present, vals, -1)
            key = np.where(key < 0, vals, key)
        key = np.where(key < 0, fn, key)
        pids = self._pids(tid, pid) if pids is None else pids
        self.launch.append((ts[launch], pids[launch].astype(np.int32), key[launch].astype(np.int32)))

    def group_slices(self, ts, dur, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        """A batch of slices on a named track (the sink's `group_slices`: GPU work)."""
        ts = np.asarray(ts, np.int64).reshape(-1)
        n = ts.size
        if not n or self.declined:
            return
        cats = self.s.codes(cat, n)
        gpu = np.isin(cats, [self.s.code(c) for c in GPU_CATS]) & (np.asarray(dur, np.int64) > 0)
        if flow_out is not None and (_ids(flow_out, n) != 0).any():
            self.declined = "a flow out of GPU work"
        if not gpu.any() or not self._hold(int(gpu.sum())):
            return
        dev = _arg(args, "device")
        device = np.zeros(n, np.int64) if dev is None else np.asarray(dev.values, np.int64)
        if dev is not None and dev.present is not None:
            device = np.where(dev.present, device, 0)
        fin = _ids(flow_in, n) if flow_in is not None else np.zeros((n, 1), np.uint64)
        if fin.shape[1] > 1:
            self.declined = "GPU work with two flows in"
            return
        fin = fin[:, 0] if fin.shape[1] else np.zeros(n, np.uint64)
        self.gpu.append((ts[gpu], np.asarray(dur, np.int64)[gpu], self.s.codes(name, n)[gpu].astype(np.int32),
                         cats[gpu] == self.s.code("gpu_kernel"), device[gpu].astype(np.int32), fin[gpu]))

    # -- the partial
    def finish(self, starts) -> dict | None:
        if self.declined or not self.gpu:
            return None
        g = [np.concatenate(c) for c in zip(*self.gpu)]
        g_ts, g_dur, g_name, g_kernel, g_dev, g_flow = g
        src = [np.concatenate(c) for c in zip(*self.src)] if self.src else [np.zeros(0, t) for t in (
            np.uint64, np.int32, np.int32, np.int32)]
        s_id, s_tid, s_pid, s_py = src
        src_row = _source_rows(s_id, g_flow)
        if src_row is None:
            return None  # a flow id with two sources or two ends
        devices, dev_i = np.unique(g_dev, return_inverse=True)
        dev_i = dev_i.reshape(-1)
        # per device, the thread whose calls have the most flows into its work (the prelude's _tl_gpu_owner)
        linked = src_row >= 0
        pairs, counts = np.unique(dev_i[linked].astype(np.int64) << 32 | s_tid[src_row[linked]].astype(np.int64)
                                  & 0xFFFFFFFF,
                                  return_counts=True)
        end = self._startup_ends()
        first = np.full(devices.size, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(first, dev_i, g_ts)
        window = np.empty(devices.size, np.int64)
        for d in range(devices.size):
            mine = (pairs >> 32) == d
            if not mine.any():
                return None  # no flow reaches it: the SQL takes the main thread
            top = (pairs[mine][counts[mine] == counts[mine].max()] & 0xFFFFFFFF).tolist()
            pids = {int(s_pid[src_row[linked & (dev_i == d)]][s_tid[src_row[linked & (dev_i == d)]] == t][0])
                    for t in top}
            if len(pids) > 1:
                return None  # a tie the SQL breaks by trace_processor's thread numbering
            window[d] = max(int(first[d]), end.get(pids.pop()) or 0)
        steady = g_kernel & (g_ts >= window[dev_i])
        py = np.where(src_row >= 0, s_py[np.maximum(src_row, 0)], -1) if s_id.size else np.full(g_ts.size, -1)
        return self._parts(np.asarray(starts, np.int64), g_ts[steady], g_dur[steady], g_name[steady],
                           g_dev[steady], py[steady])

    def _startup_ends(self) -> dict:
        """Per process: tl_startup.end_ts, the first launch of the last kernel new to it among those
        launched at least twice and first seen in the first half of its launches; None if none."""
        out: dict = {}
        if not self.launch:
            return out
        ts, pid, key = (np.concatenate(c) for c in zip(*self.launch))
        for p in np.unique(pid).tolist():
            m = pid == p
            t, k = ts[m], key[m]
            o = np.argsort(t, kind="stable")
            t, k = t[o], k[o]
            n = t.size
            keys, first_i, cnt = np.unique(k, return_index=True, return_counts=True)  # first_i: 0-based
            ok = (cnt >= 2) & (first_i + 1 <= n // 2)
            out[p] = int(t[first_i[ok]].max()) if ok.any() else None
        return out

    def _parts(self, starts, ts, dur, name, dev, py) -> dict | None:
        p = BY_ID[CHECK].defaults()
        names = np.unique(name)
        if names.size > MAX_NAMES:
            return None
        stats, chunks = {}, [{} for _ in range(starts.size)]
        chunk = np.clip(np.searchsorted(starts, ts, "right") - 1, 0, starts.size - 1)
        keep = int(p["max_outliers"])
        order = np.lexsort((dur, name))  # by name, then duration: each name's runs in a row, sorted
        cuts = np.flatnonzero(np.diff(name[order])) + 1
        for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, order.size].tolist()):
            m = order[lo:hi]
            d = dur[m]
            n = d.size
            if n < p["min_runs"]:
                continue
            p50 = int(d[max(1, math.ceil(0.50 * n)) - 1])  # nearest rank, as the prelude's _tl_percentiles
            p99 = int(d[max(1, math.ceil(0.99 * n)) - 1])
            label = self.s.strings[int(name[m[0]])]
            stats[label] = [n, p50, p99, int(d[-1])]
            out = m[(d >= p["outlier_factor"] * p50) & (d >= p["min_outlier_us"] * 1000)]
            for k in np.unique(chunk[out]).tolist():
                o = out[chunk[out] == k]
                lines: dict = {}
                for q in py[o].tolist():
                    line = _py_line(self.s.strings[q]) if q >= 0 else None
                    if line is not None:
                        lines[line] = lines.get(line, 0) + 1
                if len(lines) > MAX_LINES:
                    return None
                worst = o[np.argsort(-dur[o], kind="stable")[:keep]]
                chunks[k][label] = {
                    "outliers": int(o.size), "first_ts": int(ts[o].min()), "last_end": int((ts[o] + dur[o]).max()),
                    "lines": lines,
                    "worst": [[int(ts[i]), int(dur[i]), int(dev[i]),
                               _py_line(self.s.strings[py[i]]) if py[i] >= 0 else None] for i in worst.tolist()]}
        return {"set": {"version": VERSION, "params": p, "stats": stats}, "chunks": chunks}


def _source_rows(s_id: np.ndarray, g_flow: np.ndarray):
    """Per GPU row, the row of the call its flow comes from (-1: none); None when a flow id has two
    sources or two ends (trace_processor would chain them). Ids usually come sorted: checked in O(n)."""
    linked = g_flow[g_flow != 0]
    for ids in (s_id, linked):
        if ids.size > 1 and not (ids[1:] > ids[:-1]).all():
            sorted_ids = np.sort(ids)
            if (sorted_ids[1:] == sorted_ids[:-1]).any():
                return None
    if not s_id.size:
        return np.full(g_flow.size, -1, np.int64)
    order = np.arange(s_id.size) if (s_id[1:] > s_id[:-1]).all() else np.argsort(s_id)
    at = np.minimum(np.searchsorted(s_id[order], g_flow), s_id.size - 1)
    return np.where((g_flow != 0) & (s_id[order][at] == g_flow), order[at], -1)


def _py_line(stack: str):
    """The prelude's _tl_py_line: the innermost frame, None for an unknown stack ('?')."""
    sep = " \u2190 "
    if sep in stack:
        return stack[:stack.index(sep)]
    return None if stack == "?" else stack


# -- merging, in the SQL's words

def _fixed(x: float, digits: int) -> str:
    """SQLite's printf %.Nf: 16 significant digits, then rounded half away from zero."""
    d = Decimal(f"{x:.16g}").quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP)
    return f"{d:.{digits}f}"


def _round(x: float, digits: int) -> float:
    """SQLite's round(x, N): the exact value rounded half away from zero."""
    return float(Decimal(x).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))


def _g(x) -> str:
    return f"{x:g}"


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part and each chunk's (None: a chunk without one; then,
    or when params differ from those the partial was made with, None: run the SQL)."""
    if not isinstance(set_part, dict) or set_part.get("version") != VERSION or any(c is None for c in chunk_parts):
        return None
    made = set_part["params"]
    if {k: float(v) for k, v in made.items()} != {k: float(v) for k, v in params.items()}:
        return None
    stats = set_part["stats"]
    factor, keep = params["outlier_factor"], int(params["max_outliers"])
    per: dict = {}
    worst = []
    for part in chunk_parts:
        for label, o in part.items():
            a = per.setdefault(label, {"outliers": 0, "first_ts": o["first_ts"], "last_end": o["last_end"],
                                       "lines": {}})
            a["outliers"] += o["outliers"]
            a["first_ts"] = min(a["first_ts"], o["first_ts"])
            a["last_end"] = max(a["last_end"], o["last_end"])
            for line, k in o["lines"].items():
                a["lines"][line] = a["lines"].get(line, 0) + k
            worst += [(label, *w) for w in o["worst"]]
    rows = []
    for label in sorted(per):
        n, p50, p99, mx = stats[label]
        a = per[label]
        text = (f"{label}: {a['outliers']:,} of {n:,} runs took over {_g(factor)}x its median "
                f"({_fixed(p50 / 1e3, 1)} us); p99 {_fixed(p99 / 1e3, 1)} us, worst {_fixed(mx / 1e6, 2)} ms")
        top_line, share = None, None
        if a["lines"]:
            with_stack = sum(a["lines"].values())
            top_line, top_n = min(a["lines"].items(), key=lambda kv: (-kv[1], kv[0]))
            share = _round(top_n / with_stack, 4)
            text += f"; launched from {top_line} ({top_n} of the {with_stack} outliers with a Python stack)"
        rows.append({"severity": "warning", "finding": text, "ts": a["first_ts"],
                     "dur": a["last_end"] - a["first_ts"], "hint": None, "kernel": label,
                     "outliers": a["outliers"], "runs": n, "p50_us": _round(p50 / 1e3, 3),
                     "max_us": _round(mx / 1e3, 3), "python_line": top_line, "python_share": share})
    for label, ts, dur, dev, line in sorted(worst, key=lambda w: -w[2])[:keep]:
        p50 = stats[label][1]
        rows.append({"severity": "info", "finding": f"{label} ran {_fixed(dur / 1e6, 2)} ms on GPU {dev} "
                     f"({_fixed(dur / p50, 0)}x its median)" + (f"; launched from {line}" if line else ""),
                     "ts": ts, "dur": dur, "hint": None, "kernel": label, "outliers": None, "runs": None,
                     "p50_us": None, "max_us": _round(dur / 1e3, 3), "python_line": line, "python_share": None})
    if stats and not per:
        total = sum(s[0] for s in stats.values())
        rows.append({"severity": "ok", "finding": f"{total:,} kernel runs of {len(stats):,} kernels seen at least "
                     f"{int(params['min_runs'])} times, none over {_g(factor)}x its median",
                     "ts": None, "dur": None, "hint": None, "kernel": None, "outliers": 0, "runs": total,
                     "p50_us": None, "max_us": None, "python_line": None, "python_share": None})
    if not stats and not per:
        rows.append({"severity": "n/a", "finding": "no kernel ran often enough in the steady state to have a median",
                     "ts": None, "dur": None, "hint": None, "kernel": None, "outliers": None, "runs": None,
                     "p50_us": None, "max_us": None, "python_line": None, "python_share": None})
    return rows
