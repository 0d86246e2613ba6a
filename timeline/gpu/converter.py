"""Converter of the `gpu` family (ring 7, CUPTI records): GPU work on per-stream tracks, flows from the
CPU calls that caused it, NVTX ranges on their threads, per-GPU counters.

What the trace holds is the contract the GPU checks read (docs/checks.md, "GPU activity checks"):
- kernels, copies, memsets: slices `gpu_kernel` / `gpu_memcpy` / `gpu_memset` on a track per device
  and stream, `GPU 0 · stream 7`, under a `GPU 0` group (Chrome JSON: a pseudo process per GPU, a
  pseudo thread per stream); overlapping work on one stream (graph branches) goes to extra tracks of
  the same name;
- a flow from the CPU call slice that caused each one.  CUPTI's API records tie a correlation id to
  the calling thread and the call's time; the call slice is the cuda family's when it contains that
  time (model.call_links: neither family imports the other), else one made here from the API record
  (category cuda / cuda_driver, arg source=cupti);
- NVTX ranges: slices `nvtx` on the calling thread (name: the message, arg domain); ranges that do
  not nest (nvtxRangeStart/End across others) go to a track of their own, `NVTX ranges (tid N)`;
- counters per GPU from the intervals (intervals.py): `GPU 0 busy %` (any kernel, copy or memset
  running) and `GPU 0 copy GB/s`.

Memory stays bounded as the recording grows (issue 23): work is written in pass 2 as it arrives,
a block of rows at a time, once no later record can sort before it.  CUPTI delivers buffers per
context, not in time order, so pass 1 notes each ring-7 block's earliest work start; in pass 2 the
earliest start of the blocks still to come (the watermark) releases every pending row that starts
before it, sorted per track: the same tracks, lanes and slices as sorting all the work at once.
The busy % counter adds each released stretch's covered time to its bins (integers: the same sums);
the copy GB/s counter adds each copy's bytes to its bins as it comes.  The work is tied to its API records and
calls ahead of pass 2, in windows of time (links.py, call_links.py); the slices made from API records
are written as the link settles them, NVTX ranges (a few per step) in finish().
"""
from __future__ import annotations

import numpy as np

from ..converters import call_links
from ..converters.families import FamilyConverter
from ..converters.interface import Column
from ..demangle import demangle
from . import intervals
from . import records as R
from .links import FLOW_BASE, WORK, WorkLinks

CATEGORY = {R.KERNEL: "gpu_kernel", R.MEMCPY: "gpu_memcpy", R.MEMSET: "gpu_memset"}
MAX_TRACKS = 4096             # hostile device/stream ids: the rest share one track
MAX_BINS = 20_000             # counter points per GPU; bins are at least 1 ms
PID_MAX = 1 << 22             # a tid above this is not a kernel thread id
NO_WORK = np.iinfo(np.int64).max  # a block's earliest work start when it has none
RELEASE_ROWS = 1 << 16        # pending work rows that make pass 2 write what it can
NVTX_FIELDS = np.dtype([(f, R.GPU_RECORD[f]) for f in ("pid", "tid", "start", "end", "name", "domain", "flags")])
BINNED_DEVICES = 64           # GPUs whose busy % is binned as work is written (the rest: in finish())
# CUPTI callback ids of the calls the injection library traces (cupti_runtime_cbid.h /
# cupti_driver_cbid.h; ids are stable across CUDA versions): names for the slices made from API
# records when no cuda-family slice contains them.
RUNTIME_CBIDS = {31: "cudaMemcpy", 32: "cudaMemcpy2D", 41: "cudaMemcpyAsync", 44: "cudaMemcpy2DAsync",
                 49: "cudaMemset", 51: "cudaMemsetAsync", 131: "cudaStreamSynchronize",
                 137: "cudaEventSynchronize", 160: "cudaMemcpyPeer", 161: "cudaMemcpyPeerAsync",
                 165: "cudaDeviceSynchronize", 211: "cudaLaunchKernel", 214: "cudaLaunchKernel",
                 215: "cudaMemcpy", 216: "cudaMemcpy2D", 225: "cudaMemcpyAsync", 228: "cudaMemcpy2DAsync",
                 233: "cudaMemset", 235: "cudaMemsetAsync", 239: "cudaStreamSynchronize",
                 269: "cudaLaunchCooperativeKernel", 270: "cudaLaunchCooperativeKernel", 311: "cudaGraphLaunch",
                 312: "cudaGraphLaunch", 430: "cudaLaunchKernelExC", 431: "cudaLaunchKernelExC"}
DRIVER_CBIDS = {17: "cuCtxSynchronize", 121: "cuEventSynchronize", 126: "cuStreamSynchronize",
                216: "cuMemsetD8Async", 220: "cuMemsetD32Async", 249: "cuMemsetD8", 251: "cuMemsetD32",
                276: "cuMemcpyHtoD", 277: "cuMemcpyHtoDAsync", 278: "cuMemcpyDtoH", 279: "cuMemcpyDtoHAsync",
                280: "cuMemcpyDtoD", 281: "cuMemcpyDtoDAsync", 305: "cuMemcpy", 306: "cuMemcpyAsync",
                307: "cuLaunchKernel", 318: "cuMemcpyPeer", 319: "cuMemcpyPeerAsync", 397: "cuMemcpyHtoD",
                398: "cuMemcpyDtoH", 399: "cuMemcpyDtoD", 408: "cuMemcpy", 409: "cuMemcpyPeer", 411: "cuMemsetD8",
                413: "cuMemsetD32", 418: "cuMemcpyAsync", 421: "cuMemcpyHtoDAsync", 422: "cuMemcpyDtoHAsync",
                423: "cuMemcpyDtoDAsync", 426: "cuMemcpyPeerAsync", 428: "cuMemsetD8Async",
                430: "cuMemsetD32Async", 440: "cuStreamSynchronize", 442: "cuLaunchKernel",
                477: "cuLaunchCooperativeKernel", 478: "cuLaunchCooperativeKernel", 514: "cuGraphLaunch",
                515: "cuGraphLaunch", 652: "cuLaunchKernelEx", 653: "cuLaunchKernelEx"}

# the calls whose API record stands for GPU work to come (a launch, copy or memset; not a wait),
# as driver << 32 | cbid
_CAUSES_WORK = np.array(sorted(d << 32 | c for d, ids in ((1, DRIVER_CBIDS), (0, RUNTIME_CBIDS))
                               for c, name in ids.items() if "Synchronize" not in name), np.int64)


def _causes_work(flags: np.ndarray, cbid: np.ndarray) -> np.ndarray:
    """Per API record: its call causes GPU work (one pass, no Python step per record)."""
    driver = ((flags & R.GF_DRIVER) != 0).astype(np.int64)
    return np.isin(driver << 32 | np.asarray(cbid, np.int64), _CAUSES_WORK)


def _unique_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each distinct combination, the combination of each row), by one lexsort
    (np.unique(axis=0) is ten times slower)."""
    n = cols[0].size
    if not n:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    order = np.lexsort(cols[::-1])
    new = np.zeros(n, bool)
    new[0] = True
    for c in cols:
        s = c[order]
        new[1:] |= s[1:] != s[:-1]
    inv = np.empty(n, np.intp)
    inv[order] = np.cumsum(new) - 1
    return order[new], inv


def _dims(a: np.ndarray) -> Column:
    """(n, 3) -> "x,y,z" strings, one per distinct row (the cuda family's format)."""
    first, inv = _unique_rows(a[:, 0], a[:, 1], a[:, 2])
    return Column("", "str", inv, [f"{x},{y},{z}" for x, y, z in a[first].tolist()])


def _named(c: Column, key: str) -> Column:
    c.key = key
    return c


def _pair_key(w: np.ndarray) -> np.ndarray:
    """device << 32 | stream: sorts as (device, stream)."""
    return (w["device"].astype(np.uint64) << np.uint64(32)) | w["stream"].astype(np.uint64)


class _Busy:
    """A GPU's busy % bins, filled stretch by stretch as its work is released: the time some work
    covers in each bin, in whole ns (the sums intervals.busy_fraction makes, in any order).  The
    bins are made at the first stretch, the edges only when written (up to MAX_BINS each).  Not
    `binned` (devices past the first BINNED_DEVICES: a hostile log's, up to MAX_TRACKS of them, whose
    bins would take 160 KB each at once): the intervals are kept and binned in values(), one GPU at
    a time, as before issue 23."""

    def __init__(self, t0: int, t1: int, binned: bool = True):
        self.t0, self.t1, self.binned = t0, t1, binned
        self.bin_ns = max(1_000_000, -(-(t1 - t0) // MAX_BINS // 1_000_000) * 1_000_000)
        self.n_edges = -(-(t1 + self.bin_ns - t0) // self.bin_ns)  # np.arange(t0, t1 + bin_ns, bin_ns).size
        self.covered: np.ndarray | None = None
        self._s: list[np.ndarray] = []   # intervals not counted yet: from the last mark on
        self._e: list[np.ndarray] = []
        self.copied: np.ndarray | None = None  # bytes copied in each bin (binned), else:
        self._copies: list[np.ndarray] = []    # (start, end, bytes) per copy

    def edges(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Bin edges lo..hi (inclusive; None: the last)."""
        hi = self.n_edges - 1 if hi is None else hi
        return self.t0 + self.bin_ns * np.arange(lo, hi + 1, dtype=np.int64)

    def put(self, s: np.ndarray, e: np.ndarray) -> None:
        self._s.append(s)
        self._e.append(e)

    def add_upto(self, mark: int | None) -> None:
        """Count the time before `mark` (None: all); no interval put later starts before it."""
        if not self._s or not self.binned:
            return
        s, e = np.concatenate(self._s), np.concatenate(self._e)
        if mark is None:
            self._s, self._e = [], []
        else:
            later = e > mark
            self._s, self._e = [np.maximum(s[later], mark)], [e[later]]
            now = s < mark
            s, e = s[now], np.minimum(e[now], mark)
        if not s.size:
            return
        s, e = intervals.merge(s, e)
        if self.covered is None:
            self.covered = np.zeros(self.n_edges - 1, np.int64)
        # the edges at or before the first start .. at or after the last end
        lo = max((int(s[0]) - self.t0) // self.bin_ns, 0)
        hi = min(-(-(int(e[-1]) - self.t0) // self.bin_ns), self.n_edges - 1)
        self.covered[lo:hi] += intervals.covered(s, e, self.edges(lo, hi))

    def add_copies(self, s: np.ndarray, e: np.ndarray, nbytes: np.ndarray) -> None:
        """Copies (any order: each one's bytes are spread over its own duration)."""
        if not self.binned:
            self._copies.append(np.stack([s, e, nbytes.astype(np.int64)], 1))
            return
        if self.copied is None:
            self.copied = np.zeros(self.n_edges - 1, np.float64)
        lo = min(max((int(s.min()) - self.t0) // self.bin_ns, 0), self.n_edges - 1)
        hi = min(-(-(int(np.maximum(e, s + 1).max()) - self.t0) // self.bin_ns), self.n_edges - 1)
        if hi > lo:
            self.copied[lo:hi] += intervals.copy_moved(s, e, nbytes, self.edges(lo, hi))

    def copy_values(self) -> np.ndarray | None:
        """GB/s from each edge on (a last 0 closes it); None: no copies."""
        if self._copies:
            c = np.concatenate(self._copies)
            self._copies = []
            self.copied = intervals.copy_moved(c[:, 0], c[:, 1], c[:, 2].astype(np.uint64), self.edges())
        if self.copied is None:
            return None
        return np.append(np.round(self.copied / (self.bin_ns / 1e9) / 1e9, 6), 0.0)

    def values(self) -> np.ndarray:
        """busy % from each edge on (a last 0 closes the series at the last edge)."""
        if not self.binned:
            s, e = np.concatenate(self._s), np.concatenate(self._e)
            self._s, self._e = [], []
            return np.append(np.round(100 * intervals.busy_fraction(s, e, self.t0, self.t1, self.bin_ns)[1], 3), 0.0)
        covered = np.zeros(self.n_edges - 1, np.int64) if self.covered is None else self.covered
        return np.append(np.round(100 * (covered / float(self.bin_ns)), 3), 0.0)


class GpuConverter(FamilyConverter):
    rings = (R.RING_GPU,)
    metas = ("gpu_strings",)

    def __init__(self, model):
        super().__init__(model)
        self.strings: dict[tuple[int, int], str] = {}  # (pid, string id) -> text
        self._n = 0                                     # ring-7 records seen (pass 1)
        self._block_end: list[int] = []                 # per ring-7 block: records up to its end
        self._block_min: list[int] = []                 # its earliest work start (NO_WORK: none)
        self._pairs: set[int] = set()                   # device << 32 | stream of the work
        self._span: dict[int, list[int]] = {}           # device -> [first start, last end] of its work
        # pass 2
        self._m = 0                                     # ring-7 records seen
        self._planned = False
        self._later_min = np.zeros(0, np.int64)         # per block: earliest work start from it on
        self._pair_keys = np.zeros(0, np.uint64)        # sorted: a track per key, the first MAX_TRACKS
        self._lane_ends: dict[int, list[int]] = {}      # track -> each lane's last end
        self._pending: list[np.ndarray] = []            # work not written yet, in log order
        self._pending_idx: list[np.ndarray] = []        # its numbers in the log
        self._pending_flow: list[np.ndarray] = []       # a flow ends on it
        self._pending_n = 0
        self._release_at = RELEASE_ROWS
        self._busy: dict[int, _Busy] = {}               # device -> its busy % bins
        self._nvtx_recs: list[np.ndarray] = []
        self._links = WorkLinks(model.call_links, _causes_work)  # made ahead of pass 2, in windows

    # -- pass 1
    def scan_meta(self, meta: dict) -> None:
        pid, strings = meta.get("pid"), meta.get("strings")
        if not isinstance(pid, int) or not isinstance(strings, dict):
            return
        for k, v in strings.items():
            try:
                self.strings[(pid, int(k))] = str(v)
            except (TypeError, ValueError):
                continue

    def scan_ring(self, ring: int, recs: np.ndarray) -> None:
        self._n += recs.size
        w = recs[np.isin(recs["kind"], WORK)]
        self._block_end.append(self._n)
        self._block_min.append(int(w["start"].astype(np.int64).min()) if w.size else NO_WORK)
        if w.size:
            self._note_work(w)

    def _note_work(self, w: np.ndarray) -> None:
        """The tracks (device, stream) and each device's time span: known before pass 2 writes."""
        self._pairs.update(np.unique(_pair_key(w)).tolist())
        devs, inv = np.unique(w["device"].astype(np.int64), return_inverse=True)
        start = w["start"].astype(np.int64)
        end = np.maximum(w["end"].astype(np.int64), start)
        lows, highs = np.full(devs.size, NO_WORK, np.int64), np.full(devs.size, -1, np.int64)
        np.minimum.at(lows, inv.ravel(), start)
        np.maximum.at(highs, inv.ravel(), end)
        for d, lo, hi in zip(devs.tolist(), lows.tolist(), highs.tolist()):
            span = self._span.get(d)
            if span is None:
                self._span[d] = [lo, hi]
            else:
                span[0], span[1] = min(span[0], lo), max(span[1], hi)

    # -- pass 2
    def _plan(self, sink) -> None:
        """Before the first block of pass 2: the watermarks, the tracks, the counters' bins."""
        self._planned = True
        later = np.array(self._block_min, np.int64)
        self._later_min = np.minimum.accumulate(later[::-1])[::-1] if later.size else later
        self._block_ends = np.array(self._block_end, np.int64)
        self._block_end = self._block_min = []
        self._pair_keys = np.array(sorted(self._pairs), np.uint64)
        self._pairs = set()
        for i, dev in enumerate(sorted(self._span)[:MAX_TRACKS]):
            t0, t1 = self._span[dev]
            self._busy[dev] = _Busy(t0, t1, binned=i < BINNED_DEVICES)

    def emit_ring(self, sink, ring: int, recs: np.ndarray) -> None:
        if not self._planned:
            self._plan(sink)
        # the flows into this block's work are settled once the read-ahead has passed it
        self.model.call_links.advance(lambda: self._links.floor() >= self._m + recs.size)
        self._api_slices(sink)
        flowing = self._links.take(self._m, self._m + recs.size)
        kind = recs["kind"]
        work = np.flatnonzero(np.isin(kind, WORK))
        if work.size:
            w = recs[work]
            self._pending.append(w)
            self._pending_idx.append(work + self._m)
            self._pending_flow.append(flowing[work])
            self._pending_n += w.size
            c = w[w["kind"] == R.MEMCPY]
            if c.size:
                self._add_copies(c)
        nv = recs[kind == R.NVTX]
        if nv.size:  # the fields _nvtx reads (a quarter of the record)
            self._nvtx_recs.append(np.array(nv[list(NVTX_FIELDS.names)], NVTX_FIELDS))
        self._m += recs.size
        if self._pending_n >= self._release_at:
            # no block still to come has work starting before `mark`
            b = int(np.searchsorted(self._block_ends, self._m, "right"))
            mark = int(self._later_min[b]) if b < self._later_min.size else NO_WORK
            self._release(sink, None if mark == NO_WORK else mark)
            # rows held back (blocks out of time order) are sorted again at the next release: not
            # before as many again have come (each row is sorted O(1) times on average)
            self._release_at = max(RELEASE_ROWS, 2 * self._pending_n)

    def finish(self, sink) -> None:
        if not self._planned:
            return
        self.model.call_links.advance(lambda: self._links.floor() >= self._m)
        self._api_slices(sink)
        self._release(sink, None)
        self._counters(sink)
        if self._nvtx_recs:
            nv = np.concatenate(self._nvtx_recs)
            self._nvtx_recs = []
            self._nvtx(sink, nv)
        if self._links.late or self._links.idle:
            sink.async_slice("timeline: gpu", self.model.end_ts(), 0, "flows past the link window", "timeline",
                             {"work_without_call": self._links.late, "calls_without_work": self._links.idle,
                              "window_s": call_links.WINDOW_NS / 1e9})

    # -- the CPU side: API records no cuda-family slice contains
    def _tid_of(self, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        """CUPTI's thread id where the log knows it as a thread of pid, else pid (its main thread)."""
        first, inv = _unique_rows(pid, tid)
        ok = []
        for p, t in zip(pid[first].tolist(), tid[first].tolist()):
            th = self.model.threads.get(t) if 0 < t < PID_MAX else None
            ok.append(th is not None and th.tgid == p)
        return np.where(np.array(ok, bool)[inv], tid, pid) if first.size else pid.copy()

    def _api_slices(self, sink) -> None:
        """The API records (settled so far) no cuda-family slice contains, with their flows out."""
        done, self._links.slices = self._links.slices, []
        for a, fo in done:
            self._api_slice(sink, a, fo)

    def _api_slice(self, sink, a: dict, fo: np.ndarray) -> None:
        driver = (a["flags"] & R.GF_DRIVER) != 0
        names = [(DRIVER_CBIDS if d else RUNTIME_CBIDS).get(c, f"CUDA call (cbid {c})")
                 for d, c in zip(driver.tolist(), a["cbid"].tolist())]
        nu, ninv = np.unique(np.array(names, dtype=object), return_inverse=True)
        pid = a["pid"]
        tid = self._tid_of(pid, a["tid"])
        args = [Column("correlation_id", "int", a["corr"].astype(np.int64)),
                Column("ret", "int", a["ret"].astype(np.int64)),
                Column("source", "str", np.zeros(pid.size, np.intp), ["cupti"])]
        sink.slices(a["start"], a["end"] - a["start"], tid, pid, Column("name", "str", ninv.ravel(), list(nu)),
                    Column("cat", "str", driver.astype(np.intp), ["cuda", "cuda_driver"]), args, flow_out=fo)

    # -- the GPU side
    def _name(self, pid: int, sid: int, fallback: str) -> str:
        s = self.strings.get((pid, sid))
        return demangle(s) if s else (fallback if not sid else f"{fallback} #{sid}")

    def _release(self, sink, mark: int | None) -> None:
        """Write the pending work that starts before `mark` (None: all of it), per track in the order
        (start, longest first, log order); the rest stays pending."""
        if self._pending:
            w, idx, flowing = (np.concatenate(p) for p in (self._pending, self._pending_idx, self._pending_flow))
            start = w["start"].astype(np.int64)
            self._pending, self._pending_idx, self._pending_flow = [], [], []
            if mark is not None:
                go = start < mark
                if not go.all():
                    self._pending, self._pending_idx, self._pending_flow = [w[~go]], [idx[~go]], [flowing[~go]]
                    w, idx, flowing, start = w[go], idx[go], flowing[go], start[go]
            self._pending_n = sum(p.size for p in self._pending)
            if w.size:
                self._work(sink, w, idx, start, flowing)
        for busy in self._busy.values():
            busy.add_upto(mark)

    def _work(self, sink, w: np.ndarray, idx: np.ndarray, start: np.ndarray, flowing: np.ndarray) -> None:
        end = np.maximum(w["end"].astype(np.int64), start)
        flow_in = np.where(flowing, FLOW_BASE + idx.astype(np.uint64), np.uint64(0)).astype(np.uint64)
        # tracks: (device, stream), in order; past the first MAX_TRACKS all on one
        key = _pair_key(w)
        pos = np.searchsorted(self._pair_keys, key)
        seen = pos < self._pair_keys.size
        seen[seen] = self._pair_keys[pos[seen]] == key[seen]
        track = np.where(seen, np.minimum(pos, MAX_TRACKS), MAX_TRACKS)
        order = np.lexsort((idx, -end, start, track))
        tracks = track[order]
        bounds = np.flatnonzero(np.r_[True, tracks[1:] != tracks[:-1], True])
        kind = w["kind"]
        dev = w["device"].astype(np.int64)
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            rows = order[lo:hi]
            t = int(tracks[lo])
            if t < MAX_TRACKS:
                d, stream = int(self._pair_keys[t] >> np.uint64(32)), int(self._pair_keys[t] & np.uint64(0xFFFFFFFF))
                group, name = f"GPU {d}", f"GPU {d} \u00b7 stream {stream}"
            else:
                group = name = "GPU (more devices and streams)"
            for lane, lr in self._lanes(start[rows], end[rows], self._lane_ends.setdefault(t, [])):
                r = rows[lr]
                for k in WORK:
                    kr = r[kind[r] == k]
                    if kr.size:
                        self._write_work(sink, k, group, name, lane, w[kr], start[kr], end[kr], flow_in[kr])
        for d in np.unique(dev).tolist():
            busy = self._busy.get(d)
            if busy is not None:
                m = dev == d
                busy.put(start[m], end[m])

    @staticmethod
    def _lanes(s: np.ndarray, e: np.ndarray, ends: list[int]) -> list[tuple[int, np.ndarray]]:
        """Rows (sorted by start) split into lanes where none overlaps another (most often: one lane).
        ends: each lane's last end on this track so far, updated (the first free lane takes a row)."""
        reach = np.maximum.accumulate(e)
        if len(ends) <= 1 and (not ends or s[0] >= ends[0]) and (s.size < 2 or (s[1:] >= reach[:-1]).all()):
            ends[:] = [int(reach[-1])]
            return [(0, np.arange(s.size))]
        lane = np.zeros(s.size, np.int64)
        for i, (a, b) in enumerate(zip(s.tolist(), e.tolist())):
            for j, x in enumerate(ends):
                if x <= a:
                    ends[j] = b
                    lane[i] = j
                    break
            else:
                lane[i] = len(ends)
                ends.append(b)
        return [(j, np.flatnonzero(lane == j)) for j in range(len(ends))]

    def _write_work(self, sink, k, group, track, lane, w, start, end, flow_in) -> None:
        pid, sid = w["pid"].astype(np.int64), w["name"].astype(np.int64)
        args = [Column("device", "int", w["device"].astype(np.int64)),
                Column("stream", "int", w["stream"].astype(np.int64)),
                Column("correlation_id", "int", w["correlation"].astype(np.int64))]
        graph = w["graph_id"] != 0
        if k == R.KERNEL:
            first, inv = _unique_rows(pid, sid)
            name = Column("name", "str", inv, [self._name(p, s, "kernel")
                                               for p, s in zip(pid[first].tolist(), sid[first].tolist())])
            args += [_named(_dims(w["grid"]), "grid"), _named(_dims(w["block"]), "block"),
                     Column("registers", "int", w["registers"].astype(np.int64)),
                     Column("shared_mem", "int", w["static_smem"].astype(np.int64) + w["dynamic_smem"])]
        elif k == R.MEMCPY:
            ck, cinv = np.unique(w["copy_kind"], return_inverse=True)
            kinds = [R.COPY_KINDS.get(c, f"kind {c}") for c in ck.tolist()]
            name = Column("name", "str", cinv.ravel(), [f"Memcpy {x}" for x in kinds])
            dur = np.maximum(end - start, 1)
            args += [Column("bytes", "int", w["bytes"].astype(np.int64)),
                     Column("kind", "str", cinv.ravel(), kinds),
                     Column("gbps", "float", np.round(w["bytes"] / dur, 3))]  # bytes/ns = GB/s
            peer = (w["flags"] & R.GF_PEER) != 0
            if peer.any():
                args += [Column("src_device", "int", w["src_device"].astype(np.int64), present=peer),
                         Column("dst_device", "int", w["dst_device"].astype(np.int64), present=peer)]
        else:
            name = "Memset"
            args += [Column("bytes", "int", w["bytes"].astype(np.int64)),
                     Column("value", "int", w["value"].astype(np.int64))]
        if graph.any():
            args += [Column("graph_id", "int", w["graph_id"].astype(np.int64), present=graph),
                     Column("graph_node", "int", (w["graph_node"] & np.uint64((1 << 63) - 1)).astype(np.int64),
                            present=graph)]
        sink.group_slices(group, track, start, end - start, name, CATEGORY[k], args,
                          flow_in=flow_in if flow_in.any() else None, lane=lane)

    def _add_copies(self, c: np.ndarray) -> None:
        dev = c["device"].astype(np.int64)
        for d in np.unique(dev).tolist():
            busy = self._busy.get(d)
            if busy is not None:
                m = c[dev == d]
                s = m["start"].astype(np.int64)
                busy.add_copies(s, np.maximum(m["end"].astype(np.int64), s), m["bytes"].astype(np.uint64))

    def _counters(self, sink) -> None:
        for dev, busy in self._busy.items():
            group = f"GPU {dev}"
            # a value holds from its bin's start
            sink.group_counters(group, f"{group} busy %", busy.edges(), busy.values())
            bw = busy.copy_values()
            if bw is not None:
                sink.group_counters(group, f"{group} copy GB/s", busy.edges(), bw)

    # -- NVTX ranges on their threads
    def _nvtx(self, sink, r: np.ndarray) -> None:
        if not r.size:
            return
        pid = r["pid"].astype(np.int64)
        tid = self._tid_of(pid, r["tid"].astype(np.int64))
        start = r["start"].astype(np.int64)
        end = np.maximum(r["end"].astype(np.int64), start)
        o = np.lexsort((-end, start, tid))
        r, pid, tid, start, end = r[o], pid[o], tid[o], start[o], end[o]
        # a range that ends after its enclosing one (start/end ranges across others) breaks nesting
        nested = np.ones(r.size, bool)
        for t in np.unique(tid).tolist():
            rows = np.flatnonzero(tid == t)
            stack: list[int] = []
            for i in rows.tolist():
                while stack and end[stack[-1]] <= start[i]:
                    stack.pop()
                if stack and end[i] > end[stack[-1]]:
                    nested[i] = False
                    continue
                stack.append(i)
        keys, inv = np.unique(np.stack([pid, r["name"].astype(np.int64)], 1), axis=0, return_inverse=True)
        names = [self._name(p, s, "range") for p, s in keys.tolist()]
        dkeys, dinv = np.unique(np.stack([pid, r["domain"].astype(np.int64)], 1), axis=0, return_inverse=True)
        domains = [self.strings.get((p, s), "default") if s else "default" for p, s in dkeys.tolist()]
        inv, dinv = inv.ravel(), dinv.ravel()
        m = nested
        if m.any():
            sink.slices(start[m], (end - start)[m], tid[m], pid[m], Column("name", "str", inv[m], names), "nvtx",
                        [Column("domain", "str", dinv[m], domains),
                         Column("open", "int", np.ones(int(m.sum()), np.int64),
                                present=(r["flags"][m] & R.GF_OPEN) != 0)])
        for i in np.flatnonzero(~nested).tolist():
            sink.async_slice(f"NVTX ranges (tid {tid[i]})", int(start[i]), int(end[i] - start[i]), names[inv[i]],
                             "nvtx", {"domain": domains[dinv[i]], "tid": int(tid[i])})
