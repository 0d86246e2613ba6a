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

Everything is written in finish(): work is sorted per track first (CUPTI delivers buffers per
context, not in time order), and the call slices it links to (cuda family, an earlier converter)
have been written by then.
"""
from __future__ import annotations

import numpy as np

from ..converters.families import FamilyConverter
from ..converters.interface import Column
from ..demangle import demangle
from . import intervals
from . import records as R

# flow ids of this family: FLOW_BASE + the record's number in the log (below 2**53: JSON readers
# parse numbers as doubles)
FLOW_BASE = 0x6770 << 32
WORK = (R.KERNEL, R.MEMCPY, R.MEMSET)
CATEGORY = {R.KERNEL: "gpu_kernel", R.MEMCPY: "gpu_memcpy", R.MEMSET: "gpu_memset"}
MAX_TRACKS = 4096             # hostile device/stream ids: the rest share one track
MAX_BINS = 20_000             # counter points per GPU; bins are at least 1 ms
PID_MAX = 1 << 22             # a tid above this is not a kernel thread id
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
API = np.dtype([("pid", "<i8"), ("tid", "<i8"), ("start", "<i8"), ("end", "<i8"), ("corr", "<u4"),
                ("flags", "<u2"), ("cbid", "<u4"), ("ret", "<u4")])


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


class GpuConverter(FamilyConverter):
    rings = (R.RING_GPU,)
    metas = ("gpu_strings",)

    def __init__(self, model):
        super().__init__(model)
        self.strings: dict[tuple[int, int], str] = {}  # (pid, string id) -> text
        self._n = 0                                     # ring-7 records seen (pass 1)
        self._work_key: list[np.ndarray] = []           # (pid << 32 | correlation) of each work record
        self._work_idx: list[np.ndarray] = []           # its number in the log
        self._api: list[np.ndarray] = []
        self._has_flow = np.zeros(0, bool)              # per record number: a flow ends on it
        self._want_api = np.zeros(0, np.int64)          # per want: its API record (row of self.api)
        self._want_flow = np.zeros(0, np.uint64)
        self.api = np.zeros(0, API)
        self._recs: list[np.ndarray] = []                # pass 2: every record, written in finish()
        self._idx: list[np.ndarray] = []                 # their numbers in the log
        self._m = 0
        model.call_links.on_resolve(self._link)

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
        idx = np.arange(self._n, self._n + recs.size, dtype=np.int64)
        self._n += recs.size
        kind = recs["kind"]
        work = np.isin(kind, WORK) & (recs["correlation"] != 0)
        self._work_key.append((recs["pid"][work].astype(np.uint64) << np.uint64(32)) | recs["correlation"][work])
        self._work_idx.append(idx[work])
        api = recs[kind == R.API]
        if api.size:
            a = np.zeros(api.size, API)
            for f, g in (("pid", "pid"), ("tid", "tid"), ("start", "start"), ("end", "end"), ("corr", "correlation"),
                         ("flags", "flags"), ("cbid", "domain"), ("ret", "value")):
                a[f] = api[g]
            a["end"] = np.maximum(a["end"], a["start"])
            self._api.append(a)

    def _link(self) -> None:
        """End of pass 1 (call_links asks): each work record's API record, and a flow wanted from the
        CPU call containing it.  Of several API records with one correlation id (a runtime call and
        the driver call it makes), the runtime one, else the earliest."""
        self._has_flow = np.zeros(self._n, bool)
        if not self._api:
            return
        api = np.concatenate(self._api)
        api = api[np.lexsort((api["start"], (api["flags"] & R.GF_DRIVER) != 0, api["corr"], api["pid"]))]
        key = (api["pid"].astype(np.uint64) << np.uint64(32)) | api["corr"]
        first = np.ones(key.size, bool)
        first[1:] = key[1:] != key[:-1]
        self.api, key = api[first & (api["corr"] != 0)], key[first & (api["corr"] != 0)]
        wk, wi = np.concatenate(self._work_key), np.concatenate(self._work_idx)
        self._work_key = self._work_idx = []
        if not key.size or not wk.size:
            return
        j = np.minimum(np.searchsorted(key, wk), key.size - 1)
        hit = key[j] == wk
        j, wi = j[hit], wi[hit]
        self._has_flow[wi] = True
        self._want_api, self._want_flow = j, FLOW_BASE + wi.astype(np.uint64)
        a = self.api[j]
        self.model.call_links.want(a["pid"], a["tid"], a["start"], a["end"], self._want_flow)

    # -- pass 2
    def emit_ring(self, sink, ring: int, recs: np.ndarray) -> None:
        keep = recs["kind"] != R.API  # API records were read in pass 1 (self.api)
        self._recs.append(recs[keep])
        self._idx.append(np.flatnonzero(keep) + self._m)
        self._m += recs.size

    def finish(self, sink) -> None:
        links = self.model.call_links
        unmatched = links.unmatched()  # resolves (and so calls _link) if nobody asked yet
        if not self._recs:
            return
        recs, idx = np.concatenate(self._recs), np.concatenate(self._idx)
        self._recs = self._idx = []
        self._api_slices(sink, unmatched)
        kind = recs["kind"]
        work = np.isin(kind, WORK)
        self._work(sink, recs[work], idx[work])
        self._nvtx(sink, recs[kind == R.NVTX])

    # -- the CPU side: API records no cuda-family slice contains
    def _tid_of(self, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        """CUPTI's thread id where the log knows it as a thread of pid, else pid (its main thread)."""
        first, inv = _unique_rows(pid, tid)
        ok = []
        for p, t in zip(pid[first].tolist(), tid[first].tolist()):
            th = self.model.threads.get(t) if 0 < t < PID_MAX else None
            ok.append(th is not None and th.tgid == p)
        return np.where(np.array(ok, bool)[inv], tid, pid) if first.size else pid.copy()

    def _api_slices(self, sink, unmatched: np.ndarray) -> None:
        if not self._want_api.size or not unmatched.any():
            return
        rows, flows = self._want_api[unmatched], self._want_flow[unmatched]
        o = np.argsort(rows, kind="stable")
        rows, flows = rows[o], flows[o]
        u, start, cnt = np.unique(rows, return_index=True, return_counts=True)
        fo = np.zeros((u.size, int(cnt.max())), np.uint64)
        for j in range(fo.shape[1]):
            m = cnt > j
            fo[m, j] = flows[start[m] + j]
        a = self.api[u]
        driver = (a["flags"] & R.GF_DRIVER) != 0
        names = [(DRIVER_CBIDS if d else RUNTIME_CBIDS).get(c, f"CUDA call (cbid {c})")
                 for d, c in zip(driver.tolist(), a["cbid"].tolist())]
        nu, ninv = np.unique(np.array(names, dtype=object), return_inverse=True)
        pid = a["pid"]
        tid = self._tid_of(pid, a["tid"])
        args = [Column("correlation_id", "int", a["corr"].astype(np.int64)),
                Column("ret", "int", a["ret"].astype(np.int64)),
                Column("source", "str", np.zeros(u.size, np.intp), ["cupti"])]
        sink.slices(a["start"], a["end"] - a["start"], tid, pid, Column("name", "str", ninv.ravel(), list(nu)),
                    Column("cat", "str", driver.astype(np.intp), ["cuda", "cuda_driver"]), args, flow_out=fo)

    # -- the GPU side
    def _name(self, pid: int, sid: int, fallback: str) -> str:
        s = self.strings.get((pid, sid))
        return demangle(s) if s else (fallback if not sid else f"{fallback} #{sid}")

    def _work(self, sink, w: np.ndarray, idx: np.ndarray) -> None:
        if not w.size:
            return
        start = w["start"].astype(np.int64)
        end = np.maximum(w["end"].astype(np.int64), start)
        flow_in = np.where(self._has_flow[idx] if self._has_flow.size == self._n else False,
                           FLOW_BASE + idx.astype(np.uint64), np.uint64(0)).astype(np.uint64)
        # tracks: (device, stream), the rest on one track past MAX_TRACKS
        first, tinv = _unique_rows(w["device"], w["stream"])
        pairs = np.stack([w["device"][first], w["stream"][first]], 1).astype(np.int64)
        tinv = np.minimum(tinv, MAX_TRACKS)
        kind = w["kind"]
        order = np.argsort(tinv, kind="stable")
        bounds = np.searchsorted(tinv[order], np.arange(min(pairs.shape[0], MAX_TRACKS + 1) + 1))
        for t in range(bounds.size - 1):
            rows = order[bounds[t]:bounds[t + 1]]
            rows = rows[np.lexsort((-end[rows], start[rows]))]
            if t < MAX_TRACKS:
                dev, stream = pairs[t].tolist()
                group, track = f"GPU {dev}", f"GPU {dev} \u00b7 stream {stream}"
            else:
                group = track = "GPU (more devices and streams)"
            for lane, lr in self._lanes(start[rows], end[rows]):
                r = rows[lr]
                for k in WORK:
                    kr = r[kind[r] == k]
                    if kr.size:
                        self._write_work(sink, k, group, track, lane, w[kr], start[kr], end[kr], flow_in[kr])
        self._counters(sink, w["device"].astype(np.int64), kind, start, end, w["bytes"])

    @staticmethod
    def _lanes(s: np.ndarray, e: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """Rows (sorted by start) split into lanes where none overlaps another (most often: one lane)."""
        reach = np.maximum.accumulate(e)
        if s.size < 2 or (s[1:] >= reach[:-1]).all():
            return [(0, np.arange(s.size))]
        ends: list[int] = []
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

    def _counters(self, sink, device, kind, start, end, nbytes) -> None:
        for dev in np.unique(device).tolist()[:MAX_TRACKS]:
            d = device == dev
            s, e = start[d], end[d]
            t0, t1 = int(s.min()), int(e.max())
            bin_ns = max(1_000_000, -(-(t1 - t0) // MAX_BINS // 1_000_000) * 1_000_000)
            edges, busy = intervals.busy_fraction(s, e, t0, t1, bin_ns)
            group = f"GPU {dev}"
            # a value holds from its bin's start; a last 0 closes the series at the last edge
            sink.group_counters(group, f"{group} busy %", edges, np.append(np.round(100 * busy, 3), 0.0))
            c = d & (kind == R.MEMCPY)
            if c.any():
                edges, bw = intervals.copy_bandwidth(start[c], end[c], nbytes[c], t0, t1, bin_ns)
                sink.group_counters(group, f"{group} copy GB/s", edges, np.append(np.round(bw / 1e9, 6), 0.0))

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
