"""CUDA call records -> slices, pinned on a synthetic log that uses every probe.

The log holds random calls of every probe that makes slices (several processes and
threads, failed and entry-only calls, unknown enum values, kernel handles
named by cuModuleGetFunction, host stubs in a stand-in library, NCCL
communicators and RANK/WORLD_SIZE, allocations and frees), split into ring
blocks of random sizes.  The expectation for each slice is worked out here
from the record itself (decode_group on that one record, plus the names and
sizes the setup implies); the converted trace, in both formats, is read back
through trace_processor and must match it slice by slice.  The sinks' bulk
encodings (whole columns at once) must give the same trace as their
one-event-at-a-time path.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from timeline import events as ev
from timeline.converters import convert
from timeline.converters.chrome.sink import ChromeTrackSink
from timeline.converters.interface import TrackSink
from timeline.converters.perfetto.sink import PerfettoTrackSink
from timeline.cuda import records as cuda_records
from timeline.cuda.decode import decode_group
from timeline.cuda.converter import BOOKKEEPING
from timeline.cuda.probes import BY_NAME, CATEGORY, PROBES, table_meta
from timeline.cuda.resolve import MapsIndex
from timeline.cuda.symbols import ElfSymbols
from timeline.trace_processor import open_trace
from rawlog_factory import BOOT0, LogBuilder
from standins import build

# Kernel-name bookkeeping (registrations, handles) makes no slices: tested in test_cuda_units.
SLICED = [p for p in PROBES if p.role not in BOOKKEEPING]

PIDS = {1000: (1000, 1001), 2000: (2000, 2001)}
LIB_BASE = 0x7F00_0000_0000
STREAMS = [0, 0x5, 0x7F00_1234_5000]


def _pointer(rng) -> int:
    return rng.choice([rng.randrange(1, 1 << 47), rng.choice(STREAMS), rng.choice(STREAMS), 0xFFFF_FFFF_FFFF_FFF0])


class Synth:
    """Random call records, with what the converter should make of them."""

    def __init__(self, seed: int, kernels_lib: str):
        self.rng = random.Random(seed)
        self.recs: list[np.ndarray] = []
        self.names: list[np.ndarray] = []  # NAME records (cuModuleGetFunction strings)
        self.ts = BOOT0 + 1_000_000
        self.handles: dict[tuple[int, int], str] = {}  # (pid, CUfunction) -> name
        self.comms: dict[tuple[int, int], tuple[int, int]] = {}
        self.next_ptr = 0x7000_0000
        self.allocs: list[tuple[str, int, int]] = []   # (dev|host, pid, ptr) allocated, for frees to pick
        self.graph = {}
        elf = ElfSymbols(kernels_lib)
        add = elf.exports(["_Z9addKernelPfPKfS1_i"])["_Z9addKernelPfPKfS1_i"]
        self.maps = [{"type": "maps", "pid": 1000, "ts": BOOT0, "entries": [[LIB_BASE, LIB_BASE + (1 << 20), 0,
                                                                              kernels_lib]], "env": {}},
                     {"type": "maps", "pid": 2000, "ts": BOOT0, "entries": [],
                      "env": {"RANK": "3", "WORLD_SIZE": "8"}}]
        self.stubs = [LIB_BASE + add, LIB_BASE + add + 4, 0x1234]  # named, name+0x4, unmapped

    def record(self, p, pid, tid, args, ret=0, out=0, entry=False) -> np.ndarray:
        r = np.zeros(1, cuda_records.CUDA_EVENT)
        r["args"][0, :len(args)] = [a & ((1 << 64) - 1) for a in args]
        r["cookie"], r["tid"], r["tgid"], r["cpu"] = p.cookie(), tid, pid, self.rng.randrange(2)
        self.ts += self.rng.randrange(2_000, 20_000)
        r["ts"] = self.ts
        if entry:
            r["kind"], r["flags"] = cuda_records.CUDA_ENTRY, 0
        else:
            r["kind"] = cuda_records.CUDA_CALL
            r["flags"] = cuda_records.CF_HAS_RET | (cuda_records.CF_OUT if p.out is not None and out else 0)
            r["dur"], r["ret"], r["out"] = self.rng.randrange(0, 1_500), ret & 0xFFFFFFFF, out
            self.ts += int(r["dur"][0])
        self.recs.append(r)
        return r

    def call(self, p) -> None:
        rng = self.rng
        pid = rng.choice(list(PIDS))
        tid = rng.choice(PIDS[pid])
        args = [rng.randrange(0, 1 << 64) for _ in range(9)]  # slots no field reads
        # u64 values stay below 2**63 (trace_processor has no unsigned ints), products too
        big = 31 if p.role in ("copy2d", "collective") else 62
        for _, slot, fmt in p.fields:
            if isinstance(slot, int):
                args[slot] = {"hex": lambda: _pointer(rng),
                              "u64": lambda: rng.randrange(0, 1 << rng.choice((3, 16, 31, big))),
                              "u32": lambda: rng.randrange(0, 1 << 64),
                              "i32": lambda: rng.choice([0, 3, -1, 0xFFFF_FFFF_0000_0005, 1 << 31]),
                              }.get(fmt, lambda: rng.choice([0, 1, 2, 3, 4, 7, 9, 12, 0x1_0000_0001]))()
        ret = rng.choice([0, 0, 0, 0, 35, 2, 600, 777])
        readable = p.out is not None and rng.random() < 0.9  # else the result pointer could not be read
        out = 0
        role = p.role
        if role == "launch_rt":
            args[0] = rng.choice(self.stubs)
        elif role == "launch_cfg":  # config pointer in slot 0, function in slot 1
            args[1] = rng.choice(self.stubs if p.api == "runtime" else [*self._handles(pid), 0xBAD])
        elif role == "launch_cu":
            args[0] = rng.choice([*self._handles(pid), 0xBAD])
        elif role in ("alloc_dev", "alloc_host"):
            self.next_ptr += 0x1000
            out = self.next_ptr
            args[1] = rng.randrange(1, 1 << 30)
            if ret == 0 and readable:
                self.allocs.append((role[6:], pid, out))
        elif role in ("free_dev", "free_host") and rng.random() < 0.8:
            mine = [i for i, a in enumerate(self.allocs) if a[0] == role[5:]]
            if mine:  # free_host releases what alloc_host allocated
                _, pid, args[0] = self.allocs.pop(rng.choice(mine))
                tid = PIDS[pid][0]
        elif role == "comm_init":
            out = 0xC000 + len(self.comms)
            args[1], args[2] = 8, rng.randrange(8)
            if ret == 0 and readable:
                self.comms[(pid, out)] = (args[2], args[1])
        elif role == "collective" and rng.random() < 0.7:
            mine = [c for (cp, c) in self.comms if cp == pid]
            if mine:
                args[next(s for k, s, _ in p.fields if k == "comm")] = rng.choice(mine)
        elif role == "function_name":
            out = 0xF000 + len(self.handles)
            name = f"triton_kernel_{len(self.handles)}"
            if ret == 0 and readable:
                self.handles[(pid, out)] = name
                n = np.zeros(1, cuda_records.CUDA_EVENT)
                raw = np.zeros(72, np.uint8)
                raw[:len(name)] = np.frombuffer(name.encode(), np.uint8)
                n["args"][0] = raw.view("<u8")
                n["kind"], n["flags"] = cuda_records.CUDA_NAME, cuda_records.CF_OUT
                n["cookie"], n["out"] = p.cookie(), out
                n["tid"], n["tgid"], n["ts"] = tid, pid, self.ts
                self.names.append(n)
        entry = p.launch and rng.random() < 0.2
        self.record(p, pid, tid, args, ret=ret, out=out if readable else 0, entry=entry)

    def _handles(self, pid: int) -> list[int]:
        return [h for (hp, h) in self.handles if hp == pid]

    def expected(self) -> list[tuple]:
        """(name, category, ts, dur, tid, pid, args) per call, worked out per record."""
        idx = MapsIndex()
        for m in self.maps:
            idx.add(m)
        live: dict[tuple[str, int, int], int] = {}
        rows = []
        for r in sorted(self.recs, key=lambda r: int(r["ts"][0])):
            p = PROBES[int(r["cookie"][0]) & cuda_records.CK_ID_MASK]
            (args,) = decode_group(p, r)
            pid, tid, a = int(r["tgid"][0]), int(r["tid"][0]), [int(x) for x in r["args"][0]]
            ok = args.get("ret", 0) == 0
            if p.role in ("launch_rt", "launch_cfg", "launch_cu"):
                f = a[1] if p.role == "launch_cfg" else a[0]
                if p.api == "runtime":
                    args["kernel"], args["func"] = idx.symbolize(pid, f, int(r["ts"][0])), f"{f:#x}"
                else:
                    args["kernel"], args["function"] = self.handles.get((pid, f), f"{f:#x}"), f"{f:#x}"
            if p.api == "nccl":
                comm = None
                if p.role == "collective":
                    comm = self.comms.get((pid, a[next(s for k, s, _ in p.fields if k == "comm")]))
                if comm:
                    args["comm_rank"], args["comm_size"] = comm
                args["rank"], args["world_size"] = (3, 8) if pid == 2000 else (comm or (None, None))
                if args["rank"] is None:
                    del args["rank"], args["world_size"]
            space = p.role.split("_")[-1]
            if p.role in ("alloc_dev", "alloc_host") and "ptr" in args:
                live[(space, pid, int(r["out"][0]))] = a[1]
            if p.role in ("free_dev", "free_host") and ok:
                size = live.pop((space, pid, a[0]), None)
                if size is not None:
                    args["size"] = size
            rows.append((p.name, CATEGORY[p.api], int(r["ts"][0]), int(r["dur"][0]), tid, pid,
                         tuple(sorted(args.items()))))
        return rows

    def write(self, path: str, block_sizes) -> str:
        b = LogBuilder()
        b.header["cuda"] = {"probes": table_meta(), "mode": "full"}
        dtype = cuda_records.CUDA_EVENT
        b.header["rings"][str(cuda_records.RING_CUDA)] = {"name": "cuda", "record_size": dtype.itemsize,
                                                          "stride": ev.ring_stride(dtype)}
        for m in self.maps:
            b.blocks.append(("meta", m))
        if self.names:
            b.blocks.append(("ring", (cuda_records.RING_CUDA, ev.encode_ring_bytes(np.concatenate(self.names)))))
        recs = np.concatenate(self.recs)
        i = 0
        while i < recs.size:
            n = self.rng.choice(block_sizes)
            b.blocks.append(("ring", (cuda_records.RING_CUDA, ev.encode_ring_bytes(recs[i:i + n]))))
            i += n
        return b.write(path)


def synth_log(seed: int, kernels_lib: str, per_probe: int = 6) -> Synth:
    s = Synth(seed, kernels_lib)
    order = [p for p in SLICED if p.role in ("comm_init", "function_name")] * 2 + SLICED * per_probe
    s.rng.shuffle(order[len(SLICED):])  # inits and names first, then everything mixed
    for p in order:
        s.call(p)
    return s


def trace_slices(tp) -> list[tuple]:
    """(name, category, ts, dur, tid, pid, args) of every CUDA/NCCL slice."""
    res = tp.query("""
        select s.id, s.name, s.category, s.ts, s.dur, t.tid, p.pid, a.key, a.int_value, a.string_value, a.real_value
        from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
        left join process p using (upid) left join args a on a.arg_set_id = s.arg_set_id
        where s.category in ('cuda', 'cuda_driver', 'nccl') order by s.id""").rows
    by: dict[int, tuple] = {}
    for sid, name, cat, ts, dur, tid, pid, key, iv, sv, rv in res:
        head, args = by.setdefault(sid, ((name, cat, ts, dur, tid, pid), {}))
        if key and key.startswith(("debug.", "args.")):
            args[key.split(".", 1)[1]] = iv if iv is not None else (sv if sv is not None else rv)
    return sorted(head + (tuple(sorted(args.items())),) for head, args in by.values())


@pytest.fixture(scope="module")
def kernels_lib(tmp_path_factory):
    return build(str(tmp_path_factory.mktemp("standins")))["libkernels.so"]


@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_every_probe_converts_to_the_slices_its_records_describe(tmp_path, kernels_lib, fmt):
    s = synth_log(7, kernels_lib)
    raw = s.write(str(tmp_path / "all.tlraw"), block_sizes=(1, 3, 50, 400))
    out = str(tmp_path / ("all.pftrace" if fmt == "perfetto" else "all.json"))
    convert(raw, out, fmt=fmt)
    with open_trace(out) as tp:
        got = trace_slices(tp)
    want = sorted(s.expected())
    assert len(got) == len(want) == len(s.recs)
    assert {r[0] for r in got} == {p.name for p in SLICED}
    for g, w in zip(got, want):
        assert g == w


def trace_content(tp) -> dict:
    """What a trace says about CUDA calls: slices with args, counters, flows."""
    counters = tp.query("""select t.name, p.pid, c.ts, c.value from counter c
                           join process_counter_track t on c.track_id = t.id join process p using (upid)
                           order by t.name, p.pid, c.ts""").rows
    flows = tp.query("""select so.name, so.ts, si.name, si.ts from flow f join slice so on so.id = f.slice_out
                        join slice si on si.id = f.slice_in order by so.ts, si.ts""").rows
    return {"slices": trace_slices(tp), "counters": counters, "flows": flows}


def convert_both_ways(raw: str, out_dir, fmt: str, monkeypatch) -> tuple[dict, dict]:
    """The log converted through the bulk sink calls and through the
    per-event path (TrackSink's one slice()/counter() per row)."""
    ext = "pftrace" if fmt == "perfetto" else "json"
    bulk, per_event = str(out_dir / f"bulk.{ext}"), str(out_dir / f"per_event.{ext}")
    convert(raw, bulk, fmt=fmt)
    with monkeypatch.context() as m:
        for cls in (PerfettoTrackSink, ChromeTrackSink):
            m.setattr(cls, "slices", TrackSink.slices)
            m.setattr(cls, "counters", TrackSink.counters)
        convert(raw, per_event, fmt=fmt)
    out = []
    for path in (bulk, per_event):
        with open_trace(path) as tp:
            out.append(trace_content(tp))
    return out[0], out[1]


@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_bulk_encoding_equals_per_event_encoding(tmp_path, kernels_lib, fmt, monkeypatch):
    s = synth_log(11, kernels_lib, per_probe=12)
    # a graph chain, so flows are in the comparison too
    rt = [BY_NAME[n] for n in ("cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate",
                               "cudaGraphLaunch", "cudaGraphLaunch")]
    s.record(rt[0], 1000, 1000, [0x5, 0])
    s.record(rt[1], 1000, 1000, [0x5, 0x7F10], out=0x6A)
    s.record(rt[2], 1000, 1000, [0x7F18, 0x6A, 0], out=0x6B)
    s.record(rt[3], 1000, 1000, [0x6B, 0x5])
    s.record(rt[4], 1000, 1001, [0x6B, 0x5])
    raw = s.write(str(tmp_path / "all.tlraw"), block_sizes=(5, 700))
    bulk, per_event = convert_both_ways(raw, tmp_path, fmt, monkeypatch)
    assert len(bulk["slices"]) == len(s.recs)
    assert len(bulk["flows"]) >= 3 and len(bulk["counters"]) > 10
    assert bulk == per_event
