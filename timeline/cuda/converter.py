"""Converter of the `cuda` family: calls as slices, counters, graph flows.

Pass 1 (scan_*) learns what later records need: kernel handle names
(cuModuleGetFunction), NCCL communicators, mapping snapshots, the graph
capture -> instantiate -> launch chains, and the per-process counter series.
Pass 2 writes one slice per call on its thread's track, category 'cuda',
'cuda_driver' or 'nccl', named after the API function, with decoded
arguments; finish() writes the counter tracks.

Graph flows form a chain per graph: BeginCapture -> EndCapture ->
Instantiate -> first Launch -> next Launch ...  (a TrackSink slice carries one
outgoing and one incoming flow; `following_flow()` in trace_processor walks
the whole chain from the capture).
"""
from __future__ import annotations

import os

import numpy as np

from .. import events as ev
from ..converters.families import FamilyConverter
from .decode import MEMCPY_KINDS, decode_group, launch_geometry, name_of, probe_table
from .probes import CATEGORY, DRIVER, RUNTIME
from .resolve import MapsIndex
from .symbols import demangle

BIN_NS = 100_000_000  # rate counters: 0.1 s bins
LAUNCH_ROLES = ("launch_rt", "launch_cfg", "launch_cu")
BOOKKEEPING = ("register_function", "kernel_handle")  # feed kernel names; no slices (tens of thousands at import)
FLOW_BASE = 0xC0DA << 32  # flow ids of this family (unique in the trace)


class CudaConverter(FamilyConverter):
    rings = (ev.RING_CUDA,)
    metas = ("cuda_libs", "maps", "cuda_stats")

    def __init__(self, model):
        super().__init__(model)
        self.probes = probe_table(model.header)
        self.maps = MapsIndex()
        self.fn_names: dict[tuple[int, int], str] = {}     # (pid, CUfunction) -> name
        self.fn_cut: set[tuple[int, int]] = set()          # names cut to the record's size in BPF
        self.fn_name_ptr: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, CUfunction) -> (name ptr, ts)
        self.registered: dict[tuple[int, int], int] = {}   # (pid, host symbol) -> device name ptr
        self.handles: dict[tuple[int, int], int] = {}      # (pid, cudaKernel_t / CUfunction) -> host symbol
        self.comms: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, comm) -> (rank, nranks)
        self.graph_ev: list[tuple] = []                    # (ts, tid, role, pid, a0, a1, out, ok)
        self.flows: dict[tuple[int, int], list] = {}       # (tid, ts) -> [flow_in, flow_out]
        self.mem: list[tuple] = []                         # (ts, pid, role, ptr, size)
        self.rates: dict[tuple[int, str], dict[int, float]] = {}
        self.live: dict[tuple[int, int], int] = {}         # (pid, ptr) -> size, while emitting
        self._linked = False

    # -- pass 1 -------------------------------------------------------------
    def scan_meta(self, meta: dict) -> None:
        if meta.get("type") == "maps":
            self.maps.add(meta)

    def scan_ring(self, ring: int, recs: np.ndarray) -> None:
        ids = (recs["cookie"] & ev.CK_ID_MASK).astype(np.int64)
        ok = ((recs["flags"] & ev.CF_HAS_RET) == 0) | ((recs["ret"] & 0xFFFFFFFF) == 0)
        has_out = (recs["flags"] & ev.CF_OUT) != 0
        names = recs["kind"] == ev.CUDA_NAME
        for rec in recs[names & ok & has_out]:
            key = (int(rec["tgid"]), int(rec["out"]))
            self.fn_names[key] = name_of(rec)
            if rec["flags"] & ev.CF_TRUNC:
                self.fn_cut.add(key)
        calls = ~names
        for pid_ in np.unique(ids[calls]).tolist():
            p = self.probes[pid_] if pid_ < len(self.probes) else None
            if p is None:
                continue
            sel = calls & (ids == pid_)
            g, gok = recs[sel], ok[sel]
            role, a = p.role, g["args"]
            if role == "register_function":
                for pid, host, name in zip(g["tgid"].tolist(), a[:, 1].tolist(), a[:, 3].tolist()):
                    self.registered[(pid, host)] = name
            elif role == "kernel_handle":
                for r in g[gok & has_out[sel]]:
                    self.handles[(int(r["tgid"]), int(r["out"]))] = int(r["args"][1])
            elif role == "function_name":
                for r in g[gok & has_out[sel]]:
                    self.fn_name_ptr[(int(r["tgid"]), int(r["out"]))] = (int(r["args"][2]), int(r["ts"]))
            elif role in ("capture_begin", "capture_end", "instantiate", "graph_launch"):
                for r, k in zip(g, gok.tolist()):
                    self.graph_ev.append((int(r["ts"]), int(r["tid"]), role, int(r["tgid"]), int(r["args"][0]),
                                          int(r["args"][1]), int(r["out"]), k))
                if role == "graph_launch":
                    self._rates(g[gok], "cuda.graph_launches_per_s", np.ones(int(gok.sum())))
            elif role == "comm_init":
                for r in g[gok & has_out[sel]]:
                    self.comms[(int(r["tgid"]), int(r["out"]))] = (int(r["args"][2]) & 0xFFFFFFFF,
                                                                   int(r["args"][1]) & 0xFFFFFFFF)
            elif role in ("alloc_dev", "alloc_host"):
                for r in g[gok & has_out[sel] & (g["out"] != 0)]:
                    self.mem.append((int(r["ts"]) + int(r["dur"]), int(r["tgid"]), role, int(r["out"]),
                                     int(r["args"][1])))
            elif role in ("free_dev", "free_host"):
                for r in g[gok]:
                    self.mem.append((int(r["ts"]), int(r["tgid"]), role, int(r["args"][0]), 0))
            elif role in ("copy", "copy2d", "copy_peer"):
                g, a = g[gok], a[gok]
                kinds = self._copy_kinds(p, a)
                nbytes = a[:, 4] * a[:, 5] if role == "copy2d" else a[:, self._slot(p, "bytes")]
                for k in set(kinds):
                    m = np.array([x == k for x in kinds], bool)
                    self._rates(g[m], "cuda.memcpy_bytes_per_s." + k, nbytes[m].astype(np.float64))
            elif role in LAUNCH_ROLES:
                self._rates(g[gok], "cuda.launches_per_s", np.ones(int(gok.sum())))

    @staticmethod
    def _slot(p, key: str):
        return next(s for k, s, _ in p.fields if k == key)

    @staticmethod
    def _copy_kinds(p, a) -> list[str]:
        for key, slot, fmt in p.fields:
            if key == "kind":
                if slot == "const":
                    return [fmt] * a.shape[0]
                return [MEMCPY_KINDS.get(v, "other") for v in (a[:, slot] & 0xFFFFFFFF).tolist()]
        return ["D2D"] * a.shape[0]  # peer copies

    def _rates(self, g: np.ndarray, name: str, amounts: np.ndarray) -> None:
        if not g.size:
            return
        keys = np.stack([g["tgid"].astype(np.int64), (g["ts"] // BIN_NS).astype(np.int64)], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        sums = np.bincount(inv.ravel(), weights=amounts, minlength=len(uniq))
        for (pid, b), v in zip(uniq.tolist(), sums.tolist()):
            bins = self.rates.setdefault((pid, name), {})
            bins[b] = bins.get(b, 0.0) + v

    def _link_graphs(self) -> None:
        """Chain each graph's calls with flow ids (tid, ts identify a slice)."""
        self._linked = True
        nxt = [1]
        begun: dict[tuple[int, int], tuple] = {}    # (pid, stream) -> begin slice
        graphs: dict[tuple[int, int], tuple] = {}   # (pid, graph) -> end-capture slice
        execs: dict[tuple[int, int], tuple] = {}    # (pid, exec) -> last slice of its chain

        def link(src, dst):
            fid = FLOW_BASE + nxt[0]
            nxt[0] += 1
            self.flows.setdefault(src, [None, None])[1] = fid
            self.flows.setdefault(dst, [None, None])[0] = fid

        for ts, tid, role, pid, a0, a1, out, ok in sorted(self.graph_ev):
            key = (tid, ts)
            if role == "capture_begin" and ok:
                begun[(pid, a0)] = key
            elif role == "capture_end" and ok and out:
                src = begun.pop((pid, a0), None)
                if src:
                    link(src, key)
                graphs[(pid, out)] = key
            elif role == "instantiate" and ok and out:
                src = graphs.get((pid, a1))
                if src and self.flows.get(src, [None, None])[1] is None:
                    link(src, key)
                execs[(pid, out)] = key
            elif role == "graph_launch":
                src = execs.get((pid, a0))
                if src:
                    link(src, key)
                    execs[(pid, a0)] = key

    # -- pass 2 -------------------------------------------------------------
    def emit_meta(self, sink, meta: dict) -> None:
        t = meta.get("type")
        if t == "cuda_libs":
            for lib in meta.get("libs", []):
                sink.async_slice("timeline: cuda probes", int(meta["ts"]), 0, os.path.basename(lib["path"]),
                                 "timeline", {k: lib[k] for k in ("path", "api", "functions", "found_by")
                                              if k in lib} | {"mode": meta.get("mode")})
        elif t == "cuda_stats":
            sink.async_slice("timeline: cuda probes", int(meta["ts"]), 0, "cuda probe stats", "timeline",
                             {k: v for k, v in meta.items() if k not in ("type", "ts")})

    def emit_ring(self, sink, ring: int, recs: np.ndarray) -> None:
        if not self._linked:
            self._link_graphs()
        recs = recs[recs["kind"] != ev.CUDA_NAME]
        ids = (recs["cookie"] & ev.CK_ID_MASK).astype(np.int64)
        for pid_ in np.unique(ids).tolist():
            p = self.probes[pid_] if pid_ < len(self.probes) else None
            if p is None or p.role in BOOKKEEPING:
                continue
            group = recs[ids == pid_]
            rows = decode_group(p, group)
            if p.role in LAUNCH_ROLES:
                self._kernels(p, group, rows)
            cat, flows = CATEGORY[p.api], self.flows
            cols = zip(group["ts"].tolist(), group["dur"].tolist(), group["tid"].tolist(), group["tgid"].tolist())
            extra = p.api not in (RUNTIME, DRIVER) or p.role.startswith(("alloc", "free"))
            for (ts, dur, tid, pid), rec, args in zip(cols, group, rows):
                if extra:
                    self._extra(p, rec, pid, args)
                fl = flows.get((tid, ts))
                sink.slice(ts, dur, tid, pid, p.name, cat, args,
                           flow_out=fl[1] if fl else None, flow_in=fl[0] if fl else None)

    def _kernels(self, p, group, rows) -> None:
        func, _, _ = launch_geometry(p, group["args"])
        for rec, f, r in zip(group, func.tolist(), rows):
            pid, ts = int(rec["tgid"]), int(rec["ts"])
            r["kernel"] = self._kernel_name(pid, f, ts, p.api == RUNTIME)
            r["func" if p.api == RUNTIME else "function"] = f"{f:#x}"

    def _kernel_name(self, pid: int, f: int, ts: int, runtime: bool) -> str:
        """Runtime launches pass a host symbol or a cudaKernel_t made from one
        (__cudaGetKernel); driver launches a CUfunction named by
        cuModuleGetFunction/cuLibraryGetKernel, or derived from a named handle
        (cuKernelGetFunction) or a host symbol (cudaGetFuncBySymbol).  Follow
        the chain of handles until something names it."""
        h = f
        for _ in range(4):
            ptr = self.registered.get((pid, h))
            name = self.maps.cstring(pid, ptr, ts) if ptr else None
            if name:
                return demangle(name)
            name = self.fn_names.get((pid, h))
            if name is not None:
                if (pid, h) in self.fn_cut:  # cut in BPF: read it whole from the mapped file
                    nptr, t = self.fn_name_ptr.get((pid, h), (0, ts))
                    name = (self.maps.cstring(pid, nptr, t) if nptr else None) or name
                return demangle(name)
            nxt = self.handles.get((pid, h))
            if nxt is None:
                break
            h = nxt
        # a host symbol nobody registered under our eyes: its ELF symbol, if any
        return self.maps.symbolize(pid, h, ts) if runtime or h != f else f"{f:#x}"

    def _extra(self, p, rec, pid: int, args: dict) -> None:
        role = p.role
        if p.api not in (RUNTIME, DRIVER):  # NCCL: who am I
            rank, world = self.maps.rank(pid)
            comm = self.comms.get((pid, int(rec["args"][self._comm_slot(p)]))) if role == "collective" else None
            if comm:
                args["comm_rank"], args["comm_size"] = comm
            if rank is None and comm:
                rank, world = comm
            if rank is not None:
                args["rank"] = rank
            if world is not None:
                args["world_size"] = world
        elif role in ("alloc_dev", "alloc_host") and "ptr" in args:
            self.live[(pid, int(rec["out"]))] = int(rec["args"][1])
        elif role in ("free_dev", "free_host") and args.get("ret", 0) == 0:
            size = self.live.pop((pid, int(rec["args"][0])), None)
            if size is not None:
                args["size"] = size

    @staticmethod
    def _comm_slot(p) -> int:
        return next(s for k, s, _ in p.fields if k == "comm")

    def finish(self, sink) -> None:
        for name, role_a, role_f in (("cuda.allocated_bytes", "alloc_dev", "free_dev"),
                                     ("cuda.host_allocated_bytes", "alloc_host", "free_host")):
            live: dict[tuple[int, int], int] = {}
            total: dict[int, int] = {}
            for ts, pid, role, ptr, size in sorted(self.mem):
                if role == role_a:
                    live[(pid, ptr)] = size
                elif role == role_f and (pid, ptr) in live:
                    size = -live.pop((pid, ptr))
                else:
                    continue
                total[pid] = total.get(pid, 0) + size
                sink.counter(name, ts, total[pid], pid=pid)
        for (pid, name), bins in sorted(self.rates.items()):
            for b in sorted(bins):
                sink.counter(name, b * BIN_NS, bins[b] * 1e9 / BIN_NS, pid=pid)
                if b + 1 not in bins:
                    sink.counter(name, (b + 1) * BIN_NS, 0.0, pid=pid)
