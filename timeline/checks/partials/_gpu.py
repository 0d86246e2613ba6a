"""The GPU checks' inputs, as the converter writes them (the SQL's _tl_gpu, _tl_gpu_owner,
tl_startup and tl_gpu_window of _prelude.sql), for the partials of kernel_outliers,
gpu_queue_delay and gpu_breakdown. What is read from the converter's slice batches:
- GPU work (categories gpu_kernel/gpu_memcpy/gpu_memset, dur > 0): ts, dur, name, device, flow id in;
- the slices with a flow out (their thread, process, ts, category and `py` arg): who owns each
  device, when each kernel was launched and from which Python line;
- the kernel launches (their process, ts and kernel): each process' start-up (tl_startup).
- the NVTX ranges on threads (ts, dur, thread, name) and the recorder's main-thread markers
  (category dataloader, 'main training thread'): gpu_breakdown's per-step row.

A device's steady state starts after the start-up of the process that owns it, known only once the
whole recording is read: so the columns are held until the end of the conversion (16 to 33 bytes a
row, MAX_ROWS rows at most) and worked out once, over every chunk.

Where the SQL's answer hangs on something this does not model, there is no partial and the checks
run through trace_processor: a device no flow reaches (its owner is then the main thread, chosen by
the prelude's rules), a tie between two processes' threads for a device's owner (the SQL breaks it
by trace_processor's utid order), a flow id with two sources or two ends, a recording above MAX_ROWS.
"""
from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal
from typing import NamedTuple

import numpy as np

from ...converters.interface import Column, flow_ids
from ...gpu import intervals

GPU_CATS = ("gpu_kernel", "gpu_memcpy", "gpu_memset")
CUDA_CATS = ("cuda", "cuda_driver", "nccl")
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC",
            "cudaLaunchCooperativeKernel", "cuLaunchCooperativeKernel")
MAIN_CAT, MAIN_MARK = "dataloader", "main training thread"  # the prelude's _tl_main_pick, first rule
# host_gpu_gaps: the calls that wait for the GPU or the allocator (its `b`), and the GPU submissions
# besides launches and NCCL's (its _tl_hg_sub)
BLOCKING = ("cudaMemcpy", "cudaMemcpy2D", "cudaMalloc", "cudaFree", "cuMemcpy", "cuMemAlloc_v2", "cuMemFree_v2",
            "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoD_v2")
SUBMITS = ("cudaGraphLaunch", "cuGraphLaunch", "cudaMemcpyAsync", "cudaMemcpy2DAsync", "cuMemcpyAsync",
           "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2", "cudaMemsetAsync")
# the counters host_gpu_gaps reads without GPU activity (its _tl_hg_util: GLOB 'gpu[0-9]*.utilization_pct[ value]')
NVML_UTIL = re.compile(r"gpu[0-9].*\.utilization_pct( value)?")
MAX_ROWS = 20_000_000   # held rows of all three kinds (16 to 33 bytes each: ~0.7 GB at most)


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


class GpuColumns:
    """What the GPU checks read, gathered from pass 2's slice batches (one instance feeds all of
    them: timeline.checks.partials shares a Collector class's instance between its checks)."""

    def __init__(self, pid_of=None):
        self.s = _Strings()
        self.pid_of = pid_of or (lambda tid: tid)
        self.gpu: list[tuple] = []      # ts, dur, name, is a kernel, device, flow in
        self.src: list[tuple] = []      # flow id, tid, pid, py, ts, is a CUDA call
        self._steady = None
        self.launch: list[tuple] = []   # ts, pid, kernel key
        self.log_start = None           # the log's first record (the converter sets it)
        self.nvtx: dict[int, int] = {}  # NVTX range name -> how many thread slices of it (gpu_breakdown's steps)
        self.ranges: list[tuple] = []   # NVTX thread slices: ts, dur, tid, pid, name (gpu_breakdown's steps)
        self.marks: list[tuple] = []    # the recorder's main-thread markers: dur, ts, tid, pid
        self.block: list[tuple] = []    # blocking CUDA calls of dur > 0: ts, dur, pid (host_gpu_gaps)
        self.first_call: dict[int, int] = {}  # pid -> its first CUDA call (tl_startup.ts)
        self.submitters: set[int] = set()     # pids with a GPU submission (host_gpu_gaps' _tl_hg_sub)
        self.subs: list[tuple] = []     # GPU submissions: ts, dur, tid, pid (host_gpu_gaps without GPU activity)
        self.nvml = False               # NVML utilization counters seen (host_gpu_gaps' other judge)
        self.rows = 0
        self.declined = ""              # why no partial (empty: none yet)

    def _hold(self, n: int) -> bool:
        self.rows += n
        if self.rows > MAX_ROWS and not self.declined:
            self.declined = f"more than {MAX_ROWS:,} rows"
            self.gpu, self.src, self.launch, self.ranges, self.block = [], [], [], [], []
        return not self.declined

    def _pids(self, tid: np.ndarray, pid) -> np.ndarray:
        if pid is not None:
            return np.broadcast_to(np.asarray(pid, np.int64), tid.shape).copy()
        uniq, inv = np.unique(tid, return_inverse=True)
        return np.array([p if (p := self.pid_of(t)) is not None else t for t in uniq.tolist()],
                        np.int64)[inv.reshape(-1)]

    # -- what the converter writes
    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None) -> None:
        """One thread slice (the sink's `slice`: the per-event families, none of them CUDA's)."""
        out, into = flow_ids(flow_out), flow_ids(flow_in)
        if cat == "nvtx":
            code = np.array([self.s.code(str(name))])
            self._count_nvtx(code)
            if self._hold(1):
                self.ranges.append((np.array([ts], np.int64), np.array([dur], np.int64), np.array([tid], np.int64),
                                    self._pids(np.array([tid], np.int64), pid), code))
        if cat == MAIN_CAT and name == MAIN_MARK:
            self.marks.append((int(dur), int(ts), int(tid), int(pid if pid is not None else self.pid_of(tid) or tid)))
        if cat not in CUDA_CATS and not out:
            return
        cols = [Column(k, "str", np.zeros(1, np.int64), [str(v)]) for k, v in (args or {}).items() if v is not None]
        self.slices([ts], [dur], [tid], None if pid is None else [pid], name, cat, cols,
                    np.array([out], np.uint64) if out else None, np.array([into], np.uint64) if into else None)

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        """A batch of thread slices (the sink's `slices`)."""
        ts = np.asarray(ts, np.int64).reshape(-1)
        n = ts.size
        if not n or self.declined:
            return
        cats = self.s.codes(cat, n)
        nvtx = cats == self.s.code("nvtx")
        if nvtx.any():
            names = self.s.codes(name, n)[nvtx]
            self._count_nvtx(names)
            if self._hold(int(nvtx.sum())):
                t = np.broadcast_to(np.asarray(tid, np.int64), (n,))[nvtx]
                self.ranges.append((ts[nvtx], np.broadcast_to(np.asarray(dur, np.int64), (n,))[nvtx].copy(),
                                    t.copy(), self._pids(t, None if pid is None else
                                                         np.broadcast_to(np.asarray(pid, np.int64), (n,))[nvtx]),
                                    names))
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
                                     py[m].astype(np.int32), ts[m], cuda[m]))
        fn = fn_codes(self.s, n, name)
        launch, key = launch_keys(self.s, n, name, cuda, args, fn)
        if cuda.any():
            pids = self._pids(tid, pid) if pids is None else pids
            self._calls(ts[cuda], np.asarray(np.broadcast_to(np.asarray(dur, np.int64), (n,)))[cuda], pids[cuda],
                        fn[cuda], cats[cuda], launch[cuda], tid[cuda])
        if not launch.any() or not self._hold(int(launch.sum())):
            return
        pids = self._pids(tid, pid) if pids is None else pids
        self.launch.append((ts[launch], pids[launch].astype(np.int32), key[launch].astype(np.int32)))

    def _calls(self, ts, dur, pid, fn, cat, launch, tid) -> None:
        """host_gpu_gaps' inputs from a batch of CUDA calls: each process' first call, whether it submits
        GPU work, and its blocking calls (the SQL's `fn glob '*ynchronize'` or one of BLOCKING)."""
        order = np.lexsort((ts, pid))
        p, first = np.unique(pid[order], return_index=True)
        for q, t in zip(p.tolist(), ts[order][first].tolist()):
            self.first_call[q] = min(t, self.first_call.get(q, t))
        fns = np.unique(fn).tolist()
        strings = self.s.strings
        submit = launch | (cat == self.s.code("nccl")) | np.isin(fn, [self.s.code(x) for x in SUBMITS])
        self.submitters.update(np.unique(pid[submit]).tolist())
        if submit.any() and not self.gpu and self._hold(int(submit.sum())):  # (with GPU work they are not read)
            self.subs.append((ts[submit], dur[submit], tid[submit], pid[submit]))
        waits = [c for c in fns if c >= 0 and (strings[c].endswith("ynchronize") or strings[c] in BLOCKING)]
        b = np.isin(fn, waits) & (dur > 0)
        if b.any() and self._hold(int(b.sum())):
            self.block.append((ts[b], dur[b], pid[b]))

    def counters(self, name, ts, values, pid=None) -> None:
        """Counter samples (the sink's `counters`): only whether NVML's utilization is among them."""
        self.nvml = self.nvml or bool(NVML_UTIL.fullmatch(str(name)))

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

    def _count_nvtx(self, names: np.ndarray) -> None:
        uniq, cnt = np.unique(names, return_counts=True)
        for c, k in zip(uniq.tolist(), cnt.tolist()):
            self.nvtx[c] = self.nvtx.get(c, 0) + k

    # -- the partial
    def steady(self):
        """The GPU rows with their device's steady state (tl_gpu_window) and their flow's source, worked
        out once for every check (a dict of arrays), or None where the SQL's answer hangs on what this
        does not model (the module doc)."""
        if self._steady is None:
            out = None if self.declined or not self.gpu else self._work_out()
            self._steady = False if out is None else out
        return self._steady or None

    def _work_out(self):
        g = [np.concatenate(c) for c in zip(*self.gpu)]
        g_ts, g_dur, g_name, g_kernel, g_dev, g_flow = g
        src = [np.concatenate(c) for c in zip(*self.src)] if self.src else [np.zeros(0, t) for t in (
            np.uint64, np.int32, np.int32, np.int32, np.int64, bool)]
        s_id, s_tid, s_pid, s_py, s_ts, s_cuda = src
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
        owner = np.full(devices.size, -1, np.int64)  # its owner thread's tid; -1: tids tie (lowest utid wins)
        owner_pid = np.zeros(devices.size, np.int64)
        for d in range(devices.size):
            mine = (pairs >> 32) == d
            if not mine.any():
                return None  # no flow reaches it: the SQL takes the main thread
            top = (pairs[mine][counts[mine] == counts[mine].max()] & 0xFFFFFFFF).tolist()
            if len(top) == 1:
                owner[d] = top[0]
            pids = {int(s_pid[src_row[linked & (dev_i == d)]][s_tid[src_row[linked & (dev_i == d)]] == t][0])
                    for t in top}
            if len(pids) > 1:
                return None  # a tie the SQL breaks by trace_processor's thread numbering
            owner_pid[d] = pids.pop()
            window[d] = max(int(first[d]), end.get(int(owner_pid[d])) or 0)
        row = np.maximum(src_row, 0)
        has = src_row >= 0
        pick = (lambda a, none: np.where(has, a[row], none)) if s_id.size else (
            lambda a, none: np.full(g_ts.size, none, np.asarray(none).dtype))
        return {"ts": g_ts, "dur": g_dur, "name": g_name, "kernel": g_kernel, "device": g_dev,
                "devices": devices, "device_i": dev_i, "window": window, "steady": g_ts >= window[dev_i],
                "owner": owner, "owner_pid": owner_pid, "startup_ends": end,
                "py": pick(s_py, -1), "call_ts": pick(s_ts, 0), "from_call": pick(s_cuda, False) & has}

    def _startup_ends(self) -> dict:
        if not self.launch:
            return {}
        return startup_ends(*(np.concatenate(c) for c in zip(*self.launch)))


def fn_codes(s: _Strings, n: int, name) -> np.ndarray:
    """The prelude's fn of a slice batch's names (the name without the per-thread-stream suffixes
    _ptsz/_ptds), as string codes, worked out per distinct name."""
    uniq, inv = np.unique(s.codes(name, n), return_inverse=True)
    return np.array([s.code(s.strings[c].replace("_ptsz", "").replace("_ptds", "")) if c >= 0 else -1
                     for c in uniq.tolist()], np.int64)[inv.reshape(-1)]


def launch_keys(s: _Strings, n: int, name, cuda: np.ndarray, args, fn=None) -> tuple[np.ndarray, np.ndarray]:
    """Of a slice batch (`cuda`: its rows of CUDA categories), the kernel launches (the prelude's
    _tl_launches) and what each launched (_tl_launch_k's kernel key, a string code; -1 elsewhere).
    fn: the batch's fn_codes, where the caller has them."""
    fn = fn_codes(s, n, name) if fn is None else fn
    launch = cuda & np.isin(fn, [s.code(x) for x in LAUNCHES])
    key = np.full(n, -1, np.int64)
    if not launch.any():
        return launch, key
    for k in ("kernel", "func", "function"):  # coalesce(kernel, func, function, name): as _tl_launch_k
        c = _arg(args, k)
        if c is not None:
            key = np.where(key < 0, arg_codes(s, c, n), key)
    return launch, np.where(launch, np.where(key < 0, fn, key), -1)


def arg_codes(s: _Strings, c: Column, n: int) -> np.ndarray:
    """An arg's value per row as a string code (-1: absent); a number as "key:text", so that it is
    not equal to a string of the same text (SQLite tells them apart)."""
    if c.kind == "str":
        return s.codes(c, n)
    uniq, inv = np.unique(np.asarray(c.values), return_inverse=True)  # each distinct number named once
    text = [f"{v:#x}" if c.kind == "hex" else str(v) for v in uniq.tolist()]
    vals = np.array([s.code(f"{c.key}:{t}") for t in text], np.int64)[inv.reshape(-1)]
    return vals if c.present is None else np.where(c.present, vals, -1)


def startup_ends(ts: np.ndarray, pid: np.ndarray, key: np.ndarray) -> dict:
    """Per process, of its kernel launches (ts, pid, kernel key): tl_startup.end_ts, the first launch of
    the last kernel new to it among those launched at least twice and first seen in the first half of
    its launches; None if none."""
    out: dict = {}
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


def _source_rows(s_id: np.ndarray, g_flow: np.ndarray):
    """Per GPU row, the row of the call its flow comes from (-1: none); None when a flow id has two
    sources or two ends (trace_processor would chain them). One sort of each (none if already sorted)."""
    def ordered(ids):
        """(ids sorted, the order that sorts them), or None when an id repeats."""
        order = np.arange(ids.size) if ids.size < 2 or (ids[1:] > ids[:-1]).all() else np.argsort(ids)
        srt = ids[order]
        return None if (srt[1:] == srt[:-1]).any() else (srt, order)
    src, ends = ordered(s_id), ordered(g_flow[g_flow != 0])
    if src is None or ends is None:
        return None
    if not s_id.size:
        return np.full(g_flow.size, -1, np.int64)
    srt, order = src
    at = np.minimum(np.searchsorted(srt, g_flow), s_id.size - 1)
    return np.where((g_flow != 0) & (srt[at] == g_flow), order[at], -1)


def is_comm(name: str) -> bool:
    """The prelude's _tl_gpu.comm for a kernel name (GLOB: case-sensitive): NCCL's kernels."""
    return name.startswith("nccl") or "ncclKernel" in name or "ncclDevKernel" in name


class DeviceTimes(NamedTuple):
    """A device's steady state (tl_gpu_window) and, over it, the ns with a compute kernel running, a
    communication kernel, either, and any work (tl_gpu_time: compute, comm, compute + comm_only, busy)."""
    start: int
    span: int
    compute: int
    comm: int
    compute_or_comm: int
    busy: int


def device_times(cols: GpuColumns, g: dict) -> dict[str, DeviceTimes]:
    """str(device) -> its DeviceTimes, from steady()'s columns: unions of intervals clipped to the
    window, the same ns as the prelude's sums of elementary segments (_tl_gpu_seg)."""
    strings = cols.s.strings
    comm_names = [c for c in np.unique(g["name"]).tolist() if c >= 0 and is_comm(strings[c])]
    comm = g["kernel"] & np.isin(g["name"], comm_names)
    compute = g["kernel"] & ~comm
    s, e = g["ts"], g["ts"] + g["dur"]
    out = {}
    for d, dev in enumerate(g["devices"].tolist()):
        on = g["device_i"] == d
        lo, hi = int(g["window"][d]), int(e[on].max())
        k, c, kc, busy = (covered(s[m], e[m], lo, hi) for m in (on & compute, on & comm, on & (compute | comm), on))
        out[str(dev)] = DeviceTimes(lo, hi - lo, k, c, kc, busy)
    return out


def marked_main(marks) -> tuple[int, int] | None:
    """(tid, pid) of the main thread by the prelude's first rule (`_tl_main_pick`): the longest of the
    recorder's markers (dur, ts, tid, pid), ties to the earliest, then the lowest tid; None without a
    marker, or where that still ties between two processes (same tid: merged machines), which the SQL
    then breaks by trace_processor's row order."""
    if not marks:
        return None
    key = min((-d, ts, tid) for d, ts, tid, _ in marks)
    who = {(tid, pid) for d, ts, tid, pid in marks if (-d, ts, tid) == key}
    return who.pop() if len(who) == 1 else None


def nearest_rank(srt: np.ndarray, q: float) -> int:
    """The q-th percentile of sorted values by nearest rank, as the prelude's _tl_percentiles."""
    return int(srt[max(1, math.ceil(q * srt.size)) - 1])


def covered(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> int:
    """ns of [lo, hi) covered by the union of the intervals [s, e) (the gpu family's busy union)."""
    us, ue = intervals.merge(np.clip(s, lo, hi), np.clip(e, lo, hi))
    return int((ue - us).sum())


def outlier_summary(o: np.ndarray, ts: np.ndarray, dur: np.ndarray, py: np.ndarray, strings: list,
                    max_lines: int) -> dict | None:
    """A chunk's outliers (rows o) of one name: how many, the first start, the last end and how many
    came from each Python line (the innermost frame of their `py` stack); None past max_lines lines."""
    lines: dict = {}
    for q in py[o].tolist():
        line = _py_line(strings[q]) if q >= 0 else None
        if line is not None:
            lines[line] = lines.get(line, 0) + 1
    if len(lines) > max_lines:
        return None
    return {"outliers": int(o.size), "first_ts": int(ts[o].min()), "last_end": int((ts[o] + dur[o]).max()),
            "lines": lines}


def add_summary(per: dict, label: str, o: dict) -> None:
    """Adds a chunk's outlier_summary `o` of `label` into `per` (label -> the running total)."""
    a = per.setdefault(label, {"outliers": 0, "first_ts": o["first_ts"], "last_end": o["last_end"], "lines": {}})
    a["outliers"] += o["outliers"]
    a["first_ts"] = min(a["first_ts"], o["first_ts"])
    a["last_end"] = max(a["last_end"], o["last_end"])
    for line, k in o["lines"].items():
        a["lines"][line] = a["lines"].get(line, 0) + k


def launched_from(lines: dict) -> tuple[str, str | None, float | None]:
    """(the finding's "; launched from ..." part, the top line, its share) of the outliers' Python lines,
    as the prelude's _tl_top_py_line: the most outliers, ties to the first line in order."""
    if not lines:
        return "", None, None
    with_stack = sum(lines.values())
    top, n = min(lines.items(), key=lambda kv: (-kv[1], kv[0]))
    return f"; launched from {top} ({n} of the {with_stack} outliers with a Python stack)", top, _round(n / with_stack, 4)


def made_with(set_part, version: int, params: dict) -> bool:
    """Whether a set part is this module version's, made with these parameters (else: the SQL)."""
    return (isinstance(set_part, dict) and set_part.get("version") == version
            and {k: float(v) for k, v in set_part["params"].items()} == {k: float(v) for k, v in params.items()})


def _py_line(stack: str):
    """The prelude's _tl_py_line: the innermost frame, None for an unknown stack ('?')."""
    sep = " \u2190 "
    if sep in stack:
        return stack[:stack.index(sep)]
    return None if stack == "?" else stack


# -- merging, in the SQL's words

def _fixed(x: float, digits: int) -> str:
    """SQLite's printf %.Nf as trace_processor v52's SQLite gives it: the exact binary value rounded
    half away from zero (0.015 is 0.01499..: '0.01'; 0.045 is 0.04499..: '0.04'; 12.345 is
    12.34500..06: '12.35'; 0.25: '0.3'). Not 16 significant digits, which part ways at such edges."""
    d = Decimal(x).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP)
    return f"{d:.{digits}f}"


def _round(x: float, digits: int) -> float:
    """SQLite's round(x, N): the exact value rounded half away from zero."""
    return float(Decimal(x).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))


def _g(x) -> str:
    return f"{x:g}"
