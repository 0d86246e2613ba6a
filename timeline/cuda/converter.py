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

BIN_NS = 100_000_000  # rate counters: 0.1 s bins
LAUNCH_ROLES = ("launch_rt", "launch_cfg", "launch_cu")
FLOW_BASE = 0xC0DA << 32  # flow ids of this family (unique in the trace)
# Allocations and frees seen in pass 1: t is when the counter changes (an
# allocation's return, a free's entry), ts/tid identify the call's slice.
MEM = np.dtype([("t", "<u8"), ("ts", "<u8"), ("tid", "<u4"), ("pid", "<u4"), ("host", "?"), ("alloc", "?"),
                ("ptr", "<u8"), ("size", "<u8")])
MEM_COUNTERS = ("cuda.allocated_bytes", "cuda.host_allocated_bytes")


class CudaConverter(FamilyConverter):
    rings = (ev.RING_CUDA,)
    metas = ("cuda_libs", "maps", "cuda_stats")

    def __init__(self, model):
        super().__init__(model)
        self.probes = probe_table(model.header)
        self.maps = MapsIndex()
        self.fn_names: dict[tuple[int, int], str] = {}     # (pid, CUfunction) -> name
        self.comms: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, comm) -> (rank, nranks)
        self.graph_ev: list[tuple] = []                    # (ts, tid, role, pid, a0, a1, out, ok)
        self.flows: dict[tuple[int, int], list] = {}       # (tid, ts) -> [flow_in, flow_out]
        self.mem: list[np.ndarray] = []                    # MEM records, in log order
        self.free_size: dict[tuple[int, int], int] = {}    # (tid, ts) of a free -> size it released
        self.mem_series: list[tuple] = []                  # (counter name, pid, t, bytes) arrays
        self.rates: dict[tuple[int, str], dict[int, float]] = {}
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
            self.fn_names[(int(rec["tgid"]), int(rec["out"]))] = name_of(rec)
        calls = ~names
        for pid_ in np.unique(ids[calls]).tolist():
            p = self.probes[pid_] if pid_ < len(self.probes) else None
            if p is None:
                continue
            sel = calls & (ids == pid_)
            g, gok = recs[sel], ok[sel]
            role, a = p.role, g["args"]
            if role in ("capture_begin", "capture_end", "instantiate", "graph_launch"):
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
                self._mem(g[gok & has_out[sel] & (g["out"] != 0)], role)
            elif role in ("free_dev", "free_host"):
                self._mem(g[gok], role)
            elif role in ("copy", "copy2d", "copy_peer"):
                g, a = g[gok], a[gok]
                kinds = self._copy_kinds(p, a)
                nbytes = a[:, 4] * a[:, 5] if role == "copy2d" else a[:, self._slot(p, "bytes")]
                for k in set(kinds):
                    m = np.array([x == k for x in kinds], bool)
                    self._rates(g[m], "cuda.memcpy_bytes_per_s." + k, nbytes[m].astype(np.float64))
            elif role in LAUNCH_ROLES:
                self._rates(g[gok], "cuda.launches_per_s", np.ones(int(gok.sum())))

    def _mem(self, g: np.ndarray, role: str) -> None:
        m = np.zeros(g.size, MEM)
        alloc = role.startswith("alloc")
        m["t"] = g["ts"] + g["dur"] if alloc else g["ts"]
        m["ts"], m["tid"], m["pid"], m["host"], m["alloc"] = g["ts"], g["tid"], g["tgid"], role.endswith("host"), alloc
        m["ptr"] = g["out"] if alloc else g["args"][:, 0]
        m["size"] = g["args"][:, 1] if alloc else 0
        self.mem.append(m)

    def _match_memory(self) -> None:
        """Pair each free with the allocation it releases, in time order.

        A free releases the pointer's latest allocation if nothing freed it
        since (else it is a double free or of memory allocated before the
        recording, and changes nothing).  Gives the size of each free's slice
        and the per-process allocated-bytes series.
        """
        if not self.mem:
            return
        m = np.concatenate(self.mem)
        # stable: calls at the same time keep their log order
        s = m[np.lexsort((m["t"], m["ptr"], m["pid"], m["host"]))]
        same = np.zeros(s.size, bool)
        same[1:] = (s["host"][1:] == s["host"][:-1]) & (s["pid"][1:] == s["pid"][:-1]) & (s["ptr"][1:] == s["ptr"][:-1])
        prev_alloc = np.zeros(s.size, bool)
        prev_alloc[1:] = s["alloc"][:-1]
        prev_size = np.zeros(s.size, np.int64)
        prev_size[1:] = s["size"][:-1].astype(np.int64)
        freed = ~s["alloc"] & same & prev_alloc
        f = s[freed]
        self.free_size = dict(zip(zip(f["tid"].tolist(), f["ts"].tolist()), prev_size[freed].tolist()))
        keep = s["alloc"] | freed
        k = s[keep]
        delta = np.where(k["alloc"], k["size"].astype(np.int64), -prev_size[keep])
        o = np.lexsort((k["t"], k["pid"], k["host"]))
        k, delta = k[o], delta[o]
        starts = np.flatnonzero(np.r_[True, (k["host"][1:] != k["host"][:-1]) | (k["pid"][1:] != k["pid"][:-1])])
        bounds = np.r_[starts, k.size]
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            self.mem_series.append((MEM_COUNTERS[int(k["host"][a])], int(k["pid"][a]), k["t"][a:b],
                                    np.cumsum(delta[a:b])))

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

    def _pass1_done(self) -> None:
        if not self._linked:
            self._linked = True
            self._link_graphs()
            self._match_memory()

    def _link_graphs(self) -> None:
        """Chain each graph's calls with flow ids (tid, ts identify a slice)."""
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
        self._pass1_done()
        recs = recs[recs["kind"] != ev.CUDA_NAME]
        ids = (recs["cookie"] & ev.CK_ID_MASK).astype(np.int64)
        for pid_ in np.unique(ids).tolist():
            p = self.probes[pid_] if pid_ < len(self.probes) else None
            if p is None:
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
            pid = int(rec["tgid"])
            if p.api == RUNTIME:  # host stub address: a symbol
                r["kernel"] = self.maps.symbolize(pid, f, int(rec["ts"]))
                r["func"] = f"{f:#x}"
            else:  # CUfunction handle: named by cuModuleGetFunction, if seen
                r["kernel"] = self.fn_names.get((pid, f), f"{f:#x}")
                r["function"] = f"{f:#x}"

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
        elif role in ("free_dev", "free_host"):
            size = self.free_size.get((int(rec["tid"]), int(rec["ts"])))
            if size is not None:
                args["size"] = size

    @staticmethod
    def _comm_slot(p) -> int:
        return next(s for k, s, _ in p.fields if k == "comm")

    def finish(self, sink) -> None:
        self._pass1_done()
        for name, pid, t, total in self.mem_series:
            for ts, v in zip(t.tolist(), total.tolist()):
                sink.counter(name, ts, v, pid=pid)
        for (pid, name), bins in sorted(self.rates.items()):
            for b in sorted(bins):
                sink.counter(name, b * BIN_NS, bins[b] * 1e9 / BIN_NS, pid=pid)
                if b + 1 not in bins:
                    sink.counter(name, (b + 1) * BIN_NS, 0.0, pid=pid)
