"""Converter of the `cuda` family: calls as slices, counters, graph flows.

Pass 1 (scan_*) learns what later records need: kernel handle names
(cuModuleGetFunction), NCCL communicators, mapping snapshots, the graph
capture -> instantiate -> launch chains, which allocation each free
releases, and the per-process counter series.  Pass 2 writes one slice per
call on its thread's track, category 'cuda', 'cuda_driver' or 'nccl', named
after the API function, with decoded arguments: up to BATCH calls at a time
as columns (decode_columns) through the sink's bulk `slices`, no Python step
per call; finish() writes the counter tracks.

Graph flows form a chain per graph: BeginCapture -> EndCapture ->
Instantiate -> first Launch -> next Launch ...  (a TrackSink slice carries one
outgoing and one incoming flow; `following_flow()` in trace_processor walks
the whole chain from the capture).
"""
from __future__ import annotations

import os

import numpy as np

from . import records as cuda_records
from ..converters.families import FamilyConverter
from ..converters.interface import Column, ColumnSet
from .decode import MEMCPY_KINDS, decode_columns, launch_func, name_of, probe_table, unique_rows
from .probes import CATEGORY, NCCL, RUNTIME, Role
from .resolve import MapsIndex
from ..demangle import demangle

BIN_NS = 100_000_000  # rate counters: 0.1 s bins
LAUNCH_ROLES = (Role.LAUNCH_RT, Role.LAUNCH_CFG, Role.LAUNCH_CU)
BOOKKEEPING = (Role.REGISTER_FUNCTION, Role.KERNEL_HANDLE)  # feed kernel names; no slices (tens of thousands at import)
GRAPH_ROLES = (Role.CAPTURE_BEGIN, Role.CAPTURE_END, Role.INSTANTIATE, Role.GRAPH_LAUNCH)
PASS1_ROLES = {*LAUNCH_ROLES, *GRAPH_ROLES, *BOOKKEEPING, Role.FUNCTION_NAME, Role.COMM_INIT, Role.ALLOC_DEV, Role.ALLOC_HOST,
               Role.FREE_DEV, Role.FREE_HOST, Role.COPY, Role.COPY2D, Role.COPY_PEER}
FLOW_BASE = 0xC0DA << 32  # flow ids of this family (unique in the trace)
BATCH = 1 << 14           # calls per bulk write (larger: little faster, more memory)
# Allocations and frees seen in pass 1: t is when the counter changes (an
# allocation's return, a free's entry), ts/tid identify the call's slice.
MEM = np.dtype([("t", "<u8"), ("ts", "<u8"), ("tid", "<u4"), ("pid", "<u4"), ("host", "?"), ("alloc", "?"),
                ("ptr", "<u8"), ("size", "<u8")])
MEM_COUNTERS = ("cuda.allocated_bytes", "cuda.host_allocated_bytes")


class CudaConverter(FamilyConverter):
    rings = (cuda_records.RING_CUDA,)
    metas = ("cuda_libs", "maps", "cuda_stats")

    def __init__(self, model):
        super().__init__(model)
        self.probes = probe_table(model.header)
        self.maps = MapsIndex(model.user)  # mapped files are read as the invoking user (sudo mode)
        self.fn_names: dict[tuple[int, int], str] = {}     # (pid, CUfunction) -> name
        self.fn_cut: set[tuple[int, int]] = set()          # names cut to the record's size in BPF
        self.fn_name_ptr: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, CUfunction) -> (name ptr, ts)
        self.registered: dict[tuple[int, int], int] = {}   # (pid, host symbol) -> device name ptr
        self.handles: dict[tuple[int, int], int] = {}      # (pid, cudaKernel_t / CUfunction) -> host symbol
        self.comms: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, comm) -> (rank, nranks)
        self.graph_ev: list[tuple] = []                    # (ts, tid, role, pid, a0, a1, out, ok)
        self.flows: dict[tuple[int, int], list] = {}       # (tid, ts) -> [flow_in, flow_out]
        self.mem: list[np.ndarray] = []                    # MEM records, in log order
        self.free_size: dict[tuple[int, int], int] = {}    # (tid, ts) of a free -> size it released
        self.mem_series: list[tuple] = []                  # (counter name, pid, t, bytes) arrays
        self.rates: dict[tuple[int, str], dict[int, float]] = {}
        self._linked = False
        self._queue: list[np.ndarray] = []                 # call records waiting for a bulk write
        self._queue_seq: list[np.ndarray] = []             # their numbers among the offered slices
        self._seq = 0
        self._queued = 0
        model.call_links.follow(cuda_records.RING_CUDA, self._offer)

    # -- pass 1 -------------------------------------------------------------
    def scan_meta(self, meta: dict) -> None:
        if meta.get("type") == "maps":
            self.maps.add(meta)

    def _written(self, recs: np.ndarray) -> np.ndarray:
        """Records that become slices (both passes decide it the same way)."""
        ids = (recs["cookie"] & cuda_records.CK_ID_MASK).astype(np.int64)
        known = np.array([p is not None and p.role not in BOOKKEEPING for p in self.probes] + [False], bool)
        return (recs["kind"] != cuda_records.CUDA_NAME) & known[np.minimum(ids, len(self.probes))]

    def scan_ring(self, ring: int, recs: np.ndarray) -> None:
        # Every slice this family writes can be the source of a flow another
        # family asks for (call_links.py): its threads now, the calls as pass 2 reads ahead.
        w = self._written(recs)
        self.model.call_links.threads(recs["tid"][w], recs["tgid"][w])
        ids = (recs["cookie"] & cuda_records.CK_ID_MASK).astype(np.int64)
        ok = ((recs["flags"] & cuda_records.CF_HAS_RET) == 0) | ((recs["ret"] & 0xFFFFFFFF) == 0)
        has_out = (recs["flags"] & cuda_records.CF_OUT) != 0
        names = recs["kind"] == cuda_records.CUDA_NAME
        for rec in recs[names & ok & has_out]:
            key = (int(rec["tgid"]), int(rec["out"]))
            self.fn_names[key] = name_of(rec)
            if rec["flags"] & cuda_records.CF_TRUNC:
                self.fn_cut.add(key)
        calls = ~names
        for pid_ in np.unique(ids[calls]).tolist():
            p = self.probes[pid_] if pid_ < len(self.probes) else None
            if p is None or p.role not in PASS1_ROLES:
                continue
            sel = calls & (ids == pid_)
            if p.role in LAUNCH_ROLES:  # only counted: no copy of the records
                sel &= ok
                self._rates(recs["tgid"][sel], recs["ts"][sel], "cuda.launches_per_s", np.ones(int(sel.sum())))
                continue
            g, gok = recs[sel], ok[sel]
            role, a = p.role, g["args"]
            if role == Role.REGISTER_FUNCTION:
                for pid, host, name in zip(g["tgid"].tolist(), a[:, 1].tolist(), a[:, 3].tolist()):
                    self.registered[(pid, host)] = name
            elif role == Role.KERNEL_HANDLE:
                for r in g[gok & has_out[sel]]:
                    self.handles[(int(r["tgid"]), int(r["out"]))] = int(r["args"][1])
            elif role == Role.FUNCTION_NAME:
                for r in g[gok & has_out[sel]]:
                    self.fn_name_ptr[(int(r["tgid"]), int(r["out"]))] = (int(r["args"][2]), int(r["ts"]))
            elif role in GRAPH_ROLES:
                self.graph_ev += zip(g["ts"].tolist(), g["tid"].tolist(), [role] * g.size, g["tgid"].tolist(),
                                     a[:, 0].tolist(), a[:, 1].tolist(), g["out"].tolist(), gok.tolist())
                if role == Role.GRAPH_LAUNCH:
                    self._rates(g["tgid"][gok], g["ts"][gok], "cuda.graph_launches_per_s", np.ones(int(gok.sum())))
            elif role == Role.COMM_INIT:
                for r in g[gok & has_out[sel]]:
                    self.comms[(int(r["tgid"]), int(r["out"]))] = (int(r["args"][2]) & 0xFFFFFFFF,
                                                                   int(r["args"][1]) & 0xFFFFFFFF)
            elif role in (Role.ALLOC_DEV, Role.ALLOC_HOST):
                self._mem(g[gok & has_out[sel] & (g["out"] != 0)], role)
            elif role in (Role.FREE_DEV, Role.FREE_HOST):
                self._mem(g[gok], role)
            elif role in (Role.COPY, Role.COPY2D, Role.COPY_PEER):
                g, a = g[gok], a[gok]
                nbytes = (a[:, 4] * a[:, 5] if role == Role.COPY2D else a[:, self._slot(p, "bytes")]).astype(np.float64)
                for kind, m in self._copy_kinds(p, a):
                    self._rates(g["tgid"][m], g["ts"][m], "cuda.memcpy_bytes_per_s." + kind, nbytes[m])

    def _offer(self, recs: np.ndarray) -> None:
        """A block read ahead of pass 2: its slices, numbered in the order they will be written."""
        w = self._written(recs)
        self.model.call_links.offer(recs["tid"][w], recs["tgid"][w], recs["ts"][w], recs["dur"][w])

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
        if not k.size:
            return
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

    def _pass1_done(self) -> None:
        if not self._linked:
            self._linked = True
            self._link_graphs()
            self._match_memory()

    @staticmethod
    def _copy_kinds(p, a) -> list[tuple[str, np.ndarray]]:
        """(direction, rows) of copy records."""
        everything = np.ones(a.shape[0], bool)
        for key, slot, fmt in p.fields:
            if key == "kind":
                if slot == "const":
                    return [(fmt, everything)]
                codes = a[:, slot] & 0xFFFFFFFF
                out: dict[str, np.ndarray] = {}
                for v in np.unique(codes).tolist():
                    kind = MEMCPY_KINDS.get(v, "other")
                    out[kind] = out.get(kind, False) | (codes == v)
                return list(out.items())
        return [("D2D", everything)]  # peer copies

    def _rates(self, pids: np.ndarray, ts: np.ndarray, name: str, amounts: np.ndarray) -> None:
        if not pids.size:
            return
        keys = (pids.astype(np.int64) << 40) | (ts // BIN_NS).astype(np.int64)  # bins < 2**40
        uniq, inv = np.unique(keys, return_inverse=True)
        sums = np.bincount(inv.ravel(), weights=amounts, minlength=len(uniq))
        for k, v in zip(uniq.tolist(), sums.tolist()):
            bins = self.rates.setdefault((k >> 40, name), {})
            b = k & ((1 << 40) - 1)
            bins[b] = bins.get(b, 0.0) + v

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
            if role == Role.CAPTURE_BEGIN and ok:
                begun[(pid, a0)] = key
            elif role == Role.CAPTURE_END and ok and out:
                src = begun.pop((pid, a0), None)
                if src:
                    link(src, key)
                graphs[(pid, out)] = key
            elif role == Role.INSTANTIATE and ok and out:
                src = graphs.get((pid, a1))
                if src and self.flows.get(src, [None, None])[1] is None:
                    link(src, key)
                execs[(pid, out)] = key
            elif role == Role.GRAPH_LAUNCH:
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
        # Everything the slices need was learnt in pass 1, so blocks can wait
        # and go out together: fewer, larger bulk calls.
        self._pass1_done()
        w = self._written(recs)
        n = int(w.sum())
        self._queue.append(recs[w])
        self._queue_seq.append(np.arange(self._seq, self._seq + n, dtype=np.int64))
        self._seq += n
        self._queued += n
        if self._queued >= BATCH:
            self._flush(sink)

    def _flush(self, sink) -> None:
        if self._queue:
            recs = np.concatenate(self._queue) if len(self._queue) > 1 else self._queue[0]
            seq = np.concatenate(self._queue_seq)
            self._queue, self._queue_seq, self._queued = [], [], 0
            self._emit_calls(sink, recs, seq)

    def _emit_calls(self, sink, recs: np.ndarray, seq: np.ndarray) -> None:
        """All these calls in one bulk `slices` call: each probe's records
        decoded to columns, gathered into columns for all rows.  seq: each
        record's number among the offered slices (call_links)."""
        n = recs.size
        if not n:
            return
        ids = (recs["cookie"] & cuda_records.CK_ID_MASK).astype(np.int64)
        # Rows grouped by probe (in log order within a probe): each probe's
        # records are then a contiguous slice.
        order = np.argsort(ids, kind="stable")
        recs, ids, seq = recs[order], ids[order], seq[order]
        probe_ids, starts, counts = np.unique(ids, return_index=True, return_counts=True)
        probes = [self.probes[i] for i in probe_ids.tolist()]
        cats = list(dict.fromkeys(CATEGORY[p.api] for p in probes))
        names = np.repeat(np.arange(len(probes)), counts)
        cat_of = np.repeat(np.array([cats.index(CATEGORY[p.api]) for p in probes], np.intp), counts)
        cols = ColumnSet(n)
        flow_in = flow_out = None
        for p, start, count in zip(probes, starts.tolist(), counts.tolist()):
            idx = np.arange(start, start + count)
            group = recs[start:start + count]
            extra = decode_columns(p, group)
            if p.role in LAUNCH_ROLES:
                extra += self._kernels(p, group)
            if p.api == NCCL:
                extra += self._nccl(p, group)
            elif p.role in (Role.FREE_DEV, Role.FREE_HOST):
                extra.append(self._free_sizes(group))
            for c in extra:
                if c.present is None:
                    cols.put(c.key, c.kind, idx, c.values, c.strings)
                else:
                    cols.put(c.key, c.kind, idx[c.present], c.values[c.present], c.strings)
            if p.role in GRAPH_ROLES and self.flows:
                if flow_in is None:
                    flow_in, flow_out = np.zeros(n, np.uint64), np.zeros(n, np.uint64)
                for i, tid, ts in zip(idx.tolist(), group["tid"].tolist(), group["ts"].tolist()):
                    fin, fout = self.flows.get((tid, ts), (None, None))
                    flow_in[i], flow_out[i] = fin or 0, fout or 0
        linked = self.model.call_links.flows(seq)  # flows to what the calls caused (the gpu family's)
        if linked is not None:
            flow_out = linked if flow_out is None else np.column_stack([flow_out, linked])
        sink.slices(recs["ts"], recs["dur"], recs["tid"], recs["tgid"],
                    Column("name", "str", names, [p.name for p in probes]), Column("cat", "str", cat_of, cats),
                    cols.columns(), flow_out=flow_out, flow_in=flow_in)

    def _kernels(self, p, group) -> list[Column]:
        """kernel (name) and func/function (pointer) of launches."""
        func = launch_func(p, group["args"])
        first, inv = unique_rows(group["tgid"], func)
        pairs = list(zip(group["tgid"][first].tolist(), func[first].tolist(), group["ts"][first].tolist()))
        runtime = p.api == RUNTIME
        # the files these names are read from, opened together (one fork in sudo mode)
        self.maps.prefetch((pid, addr, t) for pid, f, ts in pairs
                           for how, addr, t in self._name_steps(pid, f, ts, runtime) if how in ("string", "symbol"))
        names = [self._kernel_name(pid, f, ts, runtime) for pid, f, ts in pairs]
        return [Column("kernel", "str", inv, names), Column("func" if runtime else "function", "hex", func)]

    def _kernel_name(self, pid: int, f: int, ts: int, runtime: bool) -> str:
        for how, value, t in self._name_steps(pid, f, ts, runtime):
            if how == "string":  # a name in a mapped file: taken when readable
                name = self.maps.cstring(pid, value, t)
                if name:
                    return demangle(name)
            elif how == "name":
                return demangle(value)
            elif how == "symbol":
                return self.maps.symbolize(pid, value, t)
        return f"{f:#x}"

    def _name_steps(self, pid: int, f: int, ts: int, runtime: bool):
        """Where the name of a launched function comes from, in order of
        preference: ("string", pointer, ts) read from a mapped file, ("name",
        text, ts) known from the log, ("symbol", address, ts) an ELF symbol.

        Runtime launches pass a host symbol or a cudaKernel_t made from one
        (__cudaGetKernel); driver launches a CUfunction named by
        cuModuleGetFunction/cuLibraryGetKernel, or derived from a named handle
        (cuKernelGetFunction) or a host symbol (cudaGetFuncBySymbol).  Follow
        the chain of handles until something names it."""
        h = f
        for _ in range(4):
            ptr = self.registered.get((pid, h))
            if ptr:
                yield "string", ptr, ts
            name = self.fn_names.get((pid, h))
            if name is not None:
                if (pid, h) in self.fn_cut:  # cut in BPF: read it whole from the mapped file
                    nptr, t = self.fn_name_ptr.get((pid, h), (0, ts))
                    if nptr:
                        yield "string", nptr, t
                yield "name", name, ts
                return
            nxt = self.handles.get((pid, h))
            if nxt is None:
                break
            h = nxt
        # a host symbol nobody registered under our eyes: its ELF symbol, if any
        if runtime or h != f:
            yield "symbol", h, ts

    def _nccl(self, p, group) -> list[Column]:
        """NCCL: who am I (RANK/WORLD_SIZE, else the communicator's rank and size)."""
        comm = group["args"][:, self._comm_slot(p)] if p.role == Role.COLLECTIVE else np.zeros(group.size, np.uint64)
        first, inv = unique_rows(group["tgid"], comm)
        rows = []
        for pid, c in zip(group["tgid"][first].tolist(), comm[first].tolist()):
            rank, world = self.maps.rank(pid)
            cm = self.comms.get((pid, c)) if p.role == Role.COLLECTIVE else None
            if rank is None and cm:
                rank, world = cm
            rows.append((*(cm or (None, None)), rank, world))
        out = []
        for j, key in enumerate(("comm_rank", "comm_size", "rank", "world_size")):
            vals = [r[j] for r in rows]
            if all(v is None for v in vals):
                continue
            present = np.array([v is not None for v in vals])[inv]
            out.append(Column(key, "int", np.array([v or 0 for v in vals], np.int64)[inv], present=present))
        return out

    def _free_sizes(self, group) -> Column:
        """Size released by each free (matched in pass 1)."""
        sizes = [self.free_size.get(k) for k in zip(group["tid"].tolist(), group["ts"].tolist())]
        return Column("size", "int", np.array([s or 0 for s in sizes], np.int64),
                      present=np.array([s is not None for s in sizes], bool))

    @staticmethod
    def _comm_slot(p) -> int:
        return next(s for k, s, _ in p.fields if k == "comm")

    def finish(self, sink) -> None:
        self._pass1_done()
        self._flush(sink)
        for name, pid, t, total in self.mem_series:
            sink.counters(name, t, total, pid=pid)
        for (pid, name), bins in sorted(self.rates.items()):
            pts = []
            for b in sorted(bins):  # each bin's rate, back to 0 after a bin followed by an empty one
                pts.append((b * BIN_NS, bins[b] * 1e9 / BIN_NS))
                if b + 1 not in bins:
                    pts.append(((b + 1) * BIN_NS, 0.0))
            sink.counters(name, np.array([t for t, _ in pts], np.int64), np.array([v for _, v in pts], np.float64),
                          pid=pid)
        self.maps.close()
