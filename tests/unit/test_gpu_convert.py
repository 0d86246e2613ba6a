"""Ring 7 (CUPTI records of the gpu family) -> GPU tracks, flows, NVTX slices and counters.

Synthetic raw logs hold what a recording with `-e cuda,gpu` stores: proc records, the cuda
family's call records (uprobes), and ring-7 records of every kind with gpu_strings META, as the
receiver writes them.  Both formats are read back through trace_processor and checked against
the records: per-stream tracks under a GPU group, args, a flow from each launch call to each
kernel (through the cuda family's slice, or a slice made from CUPTI's API record when the cuda
family is off), NVTX nesting, counters against intervals worked out by hand; hostile records
convert.  The GPU checks judge converter output as they judge tests/unit/test_checks_gpu.py's
hand-written traces (same scenarios).
"""
from __future__ import annotations

import numpy as np
import pytest

from helpers import assert_one_row_per_pid_and_tid
from rawlog_factory import BOOT0, LogBuilder, end_block
from timeline import events as ev
from timeline.converters import convert
from timeline.cuda import records as cuda_records
from timeline.cuda.probes import BY_NAME, table_meta
from timeline.gpu import records as R
from timeline.trace_processor import open_trace

PID, TID, WORKER = 1000, 1000, 1001
KERNEL_MANGLED = "_Z9addKernelPfPKfS1_i"
KERNEL_PLAIN = "addKernel(float*, float const*, float const*, int)"
RUNTIME_LAUNCH = 211  # CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000
RUNTIME_MEMCPY_ASYNC = 41
RUNTIME_MEMSET_ASYNC = 51
RUNTIME_GRAPH_LAUNCH = 311


def us(t: float) -> int:
    return BOOT0 + int(round(t * 1000))


class GpuLog:
    """A raw log under construction: the cuda family's calls and the gpu family's records."""

    def __init__(self, cuda: bool = True, span_us: int = 1_200_000):
        self.cuda = cuda
        self.span_us = span_us
        self.calls: list[np.ndarray] = []
        self.gpu: list[np.ndarray] = []
        self.strings: dict[int, str] = {}
        self.corr = 0

    def call(self, name, ts, dur, tid=TID, args=()):
        p = BY_NAME[name]
        r = np.zeros(1, cuda_records.CUDA_EVENT)
        r["args"][0, :len(args)] = list(args)
        r["cookie"], r["tid"], r["tgid"], r["ts"], r["dur"] = p.cookie(), tid, PID, ts, dur
        r["kind"], r["flags"] = cuda_records.CUDA_CALL, cuda_records.CF_HAS_RET
        self.calls.append(r)

    def rec(self, kind, start, end, **kw):
        r = np.zeros(1, R.GPU_RECORD)
        r["kind"], r["start"], r["end"], r["pid"] = kind, start, end, PID
        for k, v in kw.items():
            r[k] = v
        self.gpu.append(r)
        return r

    def string(self, sid, text):
        self.strings[sid] = text
        return sid

    def launch(self, call, ts, dur, kernels, tid=TID, cbid=RUNTIME_LAUNCH, stream=7, device=0, **kw):
        """A call slice [ts, ts+dur], CUPTI's API record inside it, and the GPU work it caused:
        kernels = [(name string id or kind-specific dict, start, end)]."""
        self.corr += 1
        if self.cuda and call:
            self.call(call, ts, dur, tid)
        self.rec(R.API, ts + 200, ts + dur - 200, tid=tid, correlation=self.corr, domain=cbid)
        for name, start, end in kernels:
            extra = dict(kw)
            if isinstance(name, dict):
                extra.update(name)
                kind = extra.pop("kind")
            else:
                kind = R.KERNEL
                extra.setdefault("grid", (128, 2, 1))
                extra.setdefault("block", (256, 1, 1))
                extra.setdefault("registers", 32)
                extra.setdefault("static_smem", 1024)
                extra.setdefault("dynamic_smem", 512)
                extra["name"] = name
            self.rec(kind, start, end, correlation=self.corr, device=device, stream=stream, **extra)
        return self.corr

    def nvtx(self, name, start, end, depth=0, tid=TID, domain=0):
        self.rec(R.NVTX, start, end, tid=tid, name=self.string(*name) if isinstance(name, tuple) else name,
                 domain=domain, value=depth)

    def write(self, path, block=7, reverse=True) -> str:
        b = self.builder()
        if self.calls:
            calls = np.concatenate(self.calls)
            for i in range(0, calls.size, 50):
                b.blocks.append(("ring", (cuda_records.RING_CUDA, ev.encode_ring_bytes(calls[i:i + 50]))))
        gpu = np.concatenate(self.gpu) if self.gpu else np.zeros(0, R.GPU_RECORD)
        # CUPTI hands buffers over out of time order: blocks in reverse (unless told otherwise)
        starts = range(0, gpu.size, block)
        for i in reversed(starts) if reverse else starts:
            b.blocks.append(("ring", (R.RING_GPU, ev.encode_ring_bytes(gpu[i:i + block]))))
        return b.write(path, end=end_block(stop_ts=us(self.span_us + 100)))

    def builder(self) -> LogBuilder:
        """The log up to the families' records: header, processes, switches, kernel names."""
        b = LogBuilder(ncpu=2, target_pid=PID)
        b.header["cuda"] = {"probes": table_meta(), "mode": "full"}
        for rid, dt, nm in ((cuda_records.RING_CUDA, cuda_records.CUDA_EVENT, "cuda"),
                            (R.RING_GPU, R.GPU_RECORD, "gpu")):
            b.header["rings"][str(rid)] = {"name": nm, "record_size": dt.itemsize, "stride": ev.ring_stride(dt)}
        b.procs(us(0), [{"pid": PID, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
                         "threads": [{"tid": TID, "comm": "python3"}, {"tid": WORKER, "comm": "worker"}]}])
        b.switch(us(0), 0, 5, TID, prev_tracked=False)
        b.switch(us(self.span_us), 0, TID, 5, prev_state=1, next_tracked=False)
        b.switch(us(10), 1, 6, WORKER, prev_state=1, prev_tracked=False)
        b.switch(us(self.span_us), 1, WORKER, 6, prev_state=1, next_tracked=False)
        b.flush()
        b.blocks.append(("meta", {"type": "gpu_strings", "pid": PID,
                                  "strings": {str(k): v for k, v in self.strings.items()}}))
        return b


def full_log(cuda=True) -> GpuLog:
    """Every kind of record once or more."""
    g = GpuLog(cuda=cuda, span_us=20_000)
    k1 = g.string(1, KERNEL_MANGLED)
    k2 = g.string(2, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    g.nvtx((10, "train_step"), us(1000), us(9000), depth=0)
    g.nvtx((11, "forward"), us(1000), us(4000), depth=1)      # same start as its parent
    g.nvtx((12, "backward"), us(4000), us(8000), depth=1)
    g.nvtx((13, "loss"), us(2000), us(2500), depth=2, domain=g.string(20, "my_domain"))
    g.nvtx((14, "prefetch"), us(8500), us(9500), depth=0)     # start/end range across train_step's end
    g.launch("cudaLaunchKernel", us(1100), 10_000, [(k1, us(1120), us(1300))])
    g.launch("cudaLaunchKernel", us(1200), 10_000, [(k1, us(1300), us(1500))])
    g.launch("cudaMemcpyAsync", us(1600), 20_000, [({"kind": R.MEMCPY, "bytes": 8_000_000, "copy_kind": 1},
                                                    us(1650), us(2650))], cbid=RUNTIME_MEMCPY_ASYNC, stream=9)
    g.launch("cudaMemsetAsync", us(2700), 8_000, [({"kind": R.MEMSET, "bytes": 4096, "value": 0},
                                                   us(2710), us(2720))], cbid=RUNTIME_MEMSET_ASYNC)
    g.launch("ncclAllReduce", us(3000), 30_000, [(k2, us(3020), us(3400))], stream=13)
    # a graph launch: three kernels, one correlation id, two of them concurrent on one stream
    g.launch("cudaGraphLaunch", us(5000), 10_000, [(k1, us(5020), us(5100)), (k1, us(5030), us(5090)),
                                                  (k1, us(5100), us(5200))], cbid=RUNTIME_GRAPH_LAUNCH,
             graph_id=4, graph_node=77)
    # launched from the worker thread, and a call the cuda family did not probe (no slice: made from CUPTI's)
    g.launch("cudaLaunchKernel", us(6000), 10_000, [(k1, us(6020), us(6100))], tid=WORKER)
    g.launch(None, us(7000), 10_000, [(k1, us(7020), us(7100))])
    # a copy on GPU 1
    g.launch("cudaMemcpyAsync", us(7500), 20_000, [({"kind": R.MEMCPY, "bytes": 2_000_000, "copy_kind": 2},
                                                    us(7520), us(8520))], cbid=RUNTIME_MEMCPY_ASYNC, device=1)
    return g


@pytest.fixture(scope="module", params=["perfetto", "chrome"])
def full(request, tmp_path_factory):
    d = tmp_path_factory.mktemp("full")
    g = full_log()
    raw = g.write(d / "full.tlraw")
    out = str(d / ("full.pftrace" if request.param == "perfetto" else "full.json"))
    convert(raw, out, fmt=request.param)
    tp = open_trace(out, engine="wasm")
    yield request.param, tp, g
    tp.close()


def arg(fmt, key, table="s"):
    return f"extract_arg({table}.arg_set_id, '{'debug' if fmt == 'perfetto' else 'args'}.{key}')"


def gpu_slices(tp, fmt):
    return tp.query(f"""select s.id, s.ts, s.dur, s.name, s.category, {arg(fmt, 'device')} as device,
                        {arg(fmt, 'stream')} as stream, {arg(fmt, 'correlation_id')} as corr
                        from slice s where s.category glob 'gpu_*' order by s.ts, s.name""").rows


def test_tracks_and_names(full):
    fmt, tp, g = full
    assert_one_row_per_pid_and_tid(tp)
    rows = gpu_slices(tp, fmt)
    assert len(rows) == 11
    if fmt == "perfetto":
        tracks = tp.query("""select t.name, p.name from slice s join track t on s.track_id = t.id
                             join track p on t.parent_id = p.id where s.category glob 'gpu_*'""").rows
    else:  # a pseudo process per GPU, a thread per stream
        tracks = tp.query("""select t.name, p.name from slice s join thread_track tt on s.track_id = tt.id
                             join thread t using (utid) join process p using (upid)
                             where s.category glob 'gpu_*'""").rows
    assert set(tracks) == {("GPU 0 \u00b7 stream 7", "GPU 0"), ("GPU 0 \u00b7 stream 9", "GPU 0"),
                           ("GPU 0 \u00b7 stream 13", "GPU 0"), ("GPU 1 \u00b7 stream 7", "GPU 1")}
    names = {r[3] for r in rows}
    assert names == {KERNEL_PLAIN, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "Memcpy HtoD", "Memcpy DtoH", "Memset"}
    # GPU slices stay off the CPU threads of the program
    on_threads = tp.query(f"""select count(*) from slice s join thread_track tt on s.track_id = tt.id
                              join thread t using (utid) where s.category glob 'gpu_*'
                              and t.tid in ({PID}, {WORKER})""").rows[0][0]
    assert on_threads == 0


def test_args(full):
    fmt, tp, g = full
    k = tp.query(f"""select {arg(fmt, 'grid')}, {arg(fmt, 'block')}, {arg(fmt, 'registers')},
                     {arg(fmt, 'shared_mem')}, {arg(fmt, 'device')}, {arg(fmt, 'stream')},
                     {arg(fmt, 'correlation_id')}, {arg(fmt, 'graph_id')}
                     from slice s where s.category = 'gpu_kernel' order by s.ts limit 1""").rows[0]
    assert k == ("128,2,1", "256,1,1", 32, 1536, 0, 7, 1, None)
    graph = tp.query(f"""select {arg(fmt, 'graph_id')}, {arg(fmt, 'correlation_id')} from slice s
                         where s.category = 'gpu_kernel' and {arg(fmt, 'graph_id')} is not null""").rows
    assert len(graph) == 3 and {r for r in graph} == {(4, 6)}
    c = tp.query(f"""select s.name, s.dur, {arg(fmt, 'bytes')}, {arg(fmt, 'kind')}, {arg(fmt, 'gbps')}
                     from slice s where s.category = 'gpu_memcpy' order by s.ts""").rows
    assert [r[:4] for r in c] == [("Memcpy HtoD", 1_000_000, 8_000_000, "HtoD"),
                                  ("Memcpy DtoH", 1_000_000, 2_000_000, "DtoH")]
    assert c[0][4] == pytest.approx(8.0) and c[1][4] == pytest.approx(2.0)
    m = tp.query(f"select {arg(fmt, 'bytes')} from slice s where s.category = 'gpu_memset'").rows
    assert m == [(4096,)]


def test_every_gpu_slice_has_a_flow_from_its_call(full):
    fmt, tp, g = full
    rows = tp.query(f"""select g.id, c.name, c.category, c.ts, c.dur, g.ts, t.tid,
                        {arg(fmt, 'correlation_id', 'g')} as corr, {arg(fmt, 'source', 'c')} as src
                        from slice g left join flow f on f.slice_in = g.id left join slice c on c.id = f.slice_out
                        left join thread_track tt on c.track_id = tt.id left join thread t using (utid)
                        where g.category glob 'gpu_*' order by g.ts""").rows
    assert all(r[1] is not None for r in rows), rows
    by_corr = {}
    for r in rows:
        by_corr.setdefault(r[7], set()).add(r[1:5] + (r[6], r[8]))
        assert r[3] <= r[5]  # the call started before the work did
    assert all(len(v) == 1 for v in by_corr.values())  # one source per correlation id
    src = {c: next(iter(v)) for c, v in by_corr.items()}
    assert src[1][:2] == ("cudaLaunchKernel", "cuda") and src[1][4] == TID and src[1][5] is None
    assert src[3][:2] == ("cudaMemcpyAsync", "cuda") and src[4][:2] == ("cudaMemsetAsync", "cuda")
    assert src[5][:2] == ("ncclAllReduce", "nccl")
    assert src[6][:2] == ("cudaGraphLaunch", "cuda")
    assert src[7][4] == WORKER
    # not probed by the cuda family: a slice made from CUPTI's API record, on the calling thread
    assert src[8][:2] == ("cudaLaunchKernel", "cuda") and src[8][4] == TID and src[8][5] == "cupti"
    assert src[8][2] == us(7000) + 200 and src[8][3] == 10_000 - 400
    n_graph = tp.query("""select count(*) from flow f join slice c on c.id = f.slice_out
                          where c.name = 'cudaGraphLaunch' and f.slice_in in
                          (select id from slice where category = 'gpu_kernel')""").rows[0][0]
    assert n_graph == 3


def test_nvtx_nesting(full):
    fmt, tp, g = full
    rows = tp.query(f"""select s.name, s.depth, s.ts, s.dur, p.name, {arg(fmt, 'domain')} from slice s
                        left join slice p on p.id = s.parent_id where s.category = 'nvtx' order by s.ts, s.depth""").rows
    by = {r[0]: r for r in rows}
    top = by["train_step"][1]  # under the main thread's role slice (category dataloader)
    assert by["train_step"][2:4] == (us(1000), 8_000_000) and by["train_step"][4] in (None, "main training thread")
    assert by["forward"][1] == top + 1 and by["forward"][4] == "train_step"
    assert by["backward"][1] == top + 1 and by["backward"][4] == "train_step"
    assert by["loss"][1] == top + 2 and by["loss"][4] == "forward" and by["loss"][5] == "my_domain"
    assert by["forward"][5] == "default"
    on = tp.query("""select distinct t.tid from slice s join thread_track tt on s.track_id = tt.id
                     join thread t using (utid) where s.category = 'nvtx' and s.name != 'prefetch'""").rows
    assert on == [(TID,)]
    # the range crossing train_step's end is kept, on a track of its own
    assert by["prefetch"][2:4] == (us(8500), 1_000_000)


def counter_values(tp, fmt, name):
    like = name if fmt == "perfetto" else name + "%"
    return tp.query(f"""select c.ts, c.value from counter c join counter_track t on c.track_id = t.id
                        where t.name like '{like}' order by c.ts""").rows


def test_counters_against_intervals_by_hand(full):
    fmt, tp, g = full
    busy = counter_values(tp, fmt, "GPU 0 busy %")
    # GPU 0 work from 1120 us to 7100 us: one bin of 1 ms from each start
    t0 = us(1120)
    work = [(1120, 1500), (1650, 2650), (2710, 2720), (3020, 3400), (5020, 5200), (6020, 6100), (7020, 7100)]
    for i, (ts, v) in enumerate(busy[:-1]):
        lo, hi = 1120 + 1000 * i, 1120 + 1000 * (i + 1)
        covered = sum(max(0, min(b, hi) - max(a, lo)) for a, b in work)
        assert ts == t0 + 1_000_000 * i and v == pytest.approx(100 * covered / 1000, abs=1e-3), (i, ts, v)
    assert len(busy) == 7 and busy[-1] == (us(7120), 0)  # closed at the last bin's end
    bw = counter_values(tp, fmt, "GPU 0 copy GB/s")
    # 8 MB over [1650, 2650) us: 8 GB/s; bins [1120, 2120) and [2120, 3120) hold 470 and 530 us of it
    assert bw[0][1] == pytest.approx(8 * 0.47, rel=1e-3) and bw[1][1] == pytest.approx(8 * 0.53, rel=1e-3)
    assert counter_values(tp, fmt, "GPU 1 busy %")[0][1] == pytest.approx(100.0)


def test_cuda_family_off(tmp_path):
    """Without the cuda family every flow starts at a slice made from CUPTI's API record."""
    raw = full_log(cuda=False).write(tmp_path / "nocuda.tlraw")
    convert(raw, str(tmp_path / "t.pftrace"))
    with open_trace(str(tmp_path / "t.pftrace"), engine="wasm") as tp:
        rows = tp.query("""select g.id, c.name, extract_arg(c.arg_set_id, 'debug.source') from slice g
                           left join flow f on f.slice_in = g.id left join slice c on c.id = f.slice_out
                           where g.category glob 'gpu_*'""").rows
        assert len(rows) == 11 and all(r[2] == "cupti" for r in rows), rows
        assert {r[1] for r in rows} == {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaGraphLaunch"}
        assert_one_row_per_pid_and_tid(tp)


def test_hostile_records_convert(tmp_path):
    g = GpuLog(span_us=10_000)
    g.string(1, "\udcff bad \x00 name")
    g.launch("cudaLaunchKernel", us(100), 5_000, [(999, us(110), us(150))])            # unknown string id
    g.launch("cudaLaunchKernel", us(200), 5_000, [(1, us(300), us(250))])               # end < start
    g.launch("cudaLaunchKernel", us(400), 5_000, [(1, us(410), us(420))], device=0xFFFFFFFF, stream=0xFFFFFFFF)
    g.rec(R.KERNEL, us(500), us(510), correlation=12345, name=1)                       # no API record
    g.rec(R.API, us(600), us(550), tid=0xDEADBEEF, correlation=77, domain=999999)       # no work, tid unknown
    g.rec(R.MEMCPY, us(700), us(700), correlation=0, copy_kind=200, bytes=1 << 63)      # zero length, bad kind
    g.rec(R.NVTX, us(800), us(700), tid=0xDEADBEEF, name=424242, domain=5)              # end < start, unknown tid
    g.rec(99, us(900), us(950))                                                        # unknown kind
    raw = g.write(tmp_path / "hostile.tlraw", block=3)
    for out in ("h.pftrace", "h.json"):
        convert(raw, str(tmp_path / out))
        with open_trace(str(tmp_path / out), engine="wasm") as tp:
            names = {r[0] for r in tp.query("select name from slice where category glob 'gpu_*'").rows}
            assert "kernel #999" in names and "Memcpy kind 200" in names
            assert tp.query("select count(*) from slice where category = 'gpu_kernel' and dur < 0").rows[0][0] == 0
            assert_one_row_per_pid_and_tid(tp)


# -- the GPU checks on converter output: tests/unit/test_checks_gpu.py's scenarios
STEPS = 50


def check_log(host_bound: bool, steps: bool = True, copies: bool = False) -> GpuLog:
    """steps: an NVTX range 'train_step' around each step; copies: a host-to-device copy on its own
    stream at each step's start, beside the step's first kernels."""
    g = GpuLog()
    names = {f"k{i}": g.string(i + 1, f"k{i}") for i in range(5)}
    nccl = g.string(9, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    step_name = g.string(20, "train_step")
    t, gpu_free = 2000.0, 0.0

    def launch(call, kernel, gpu_dur, stream, start=None):
        nonlocal t
        begin = max(t + 3, start if start is not None else gpu_free)
        g.launch(call, us(t), 5000, [(kernel, us(begin), us(begin + gpu_dur))], stream=stream)
        t += 5
        return begin, begin + gpu_dur

    for step in range(STEPS):
        step_ts = t
        t += 1
        if copies:
            g.launch("cudaMemcpyAsync", us(t), 5000, [({"kind": R.MEMCPY, "bytes": 1_000_000, "copy_kind": 1},
                                                       us(t + 2), us(t + 152))], cbid=RUNTIME_MEMCPY_ASYNC, stream=11)
            t += 1
        if host_bound:
            t += 500
            for i in range(10):
                dur = 2000 if (step == 30 and i == 0) else 20
                _, gpu_free = launch("cudaLaunchKernel", names[f"k{i % 5}"], dur, 7)
                t += 20
            _, end = launch("ncclAllReduce", nccl, 300, 9, start=gpu_free)
            gpu_free = end
            g.call("cudaStreamSynchronize", us(t), int((end - t + 5) * 1000))
            t = end + 10
        else:
            for i in range(10):
                begin, gpu_free = launch("cudaLaunchKernel", names[f"k{i % 5}"], 100, 7)
                if i == 4:
                    launch("ncclAllReduce", nccl, 300, 9, start=begin)
                t += 1
            t += 800
        if steps:
            g.nvtx(step_name, us(step_ts), us(t))
    return g


@pytest.fixture(scope="module")
def check_traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("checks")
    out = {}
    for key, host in (("host", True), ("gpu", False)):
        raw = check_log(host).write(d / f"{key}.tlraw", block=500)
        convert(raw, str(d / f"{key}.pftrace"))
        out[key] = str(d / f"{key}.pftrace")
    return out


GPU_CHECKS = ["gpu_breakdown", "gpu_queue_delay", "kernel_outliers", "comm_overlap"]


def test_checks_fire_on_host_bound_conversion(check_traces):
    from test_query_check import result
    st = {cid: result(check_traces["host"], "wasm", cid) for cid in GPU_CHECKS}
    assert {cid: r.status for cid, r in st.items()} == dict.fromkeys(GPU_CHECKS, "warning"), st
    bd = st["gpu_breakdown"].findings[0]
    assert 0.4 < bd.evidence["idle_fraction"] < 0.7 and 0.15 < bd.evidence["comm_fraction"] < 0.35
    steps = [f for f in st["gpu_breakdown"].findings if "per step" in f.message]
    assert len(steps) == 1 and "'train_step', 50 steps" in steps[0].message
    assert st["gpu_queue_delay"].findings[0].evidence["delay_p50_us"] == pytest.approx(3, abs=0.5)
    ko = st["kernel_outliers"].findings[0]
    assert ko.evidence["kernel"] == "k0" and ko.evidence["outliers"] == 1 and ko.evidence["max_us"] == 2000
    assert st["comm_overlap"].findings[0].evidence["overlap_fraction"] == 0
    gaps = result(check_traces["host"], "wasm", "host_gpu_gaps")
    assert gaps.status == "error" and gaps.findings[0].message.startswith("GPU 0 was idle")


def test_checks_quiet_on_gpu_bound_conversion(check_traces):
    from test_query_check import result
    st = {cid: result(check_traces["gpu"], "wasm", cid) for cid in GPU_CHECKS}
    assert {cid: r.status for cid, r in st.items()} == dict.fromkeys(GPU_CHECKS, "ok"), st
    assert st["gpu_queue_delay"].findings[0].evidence["delay_p50_us"] > 1000
    assert st["comm_overlap"].findings[0].evidence["overlap_fraction"] == 1
    assert result(check_traces["gpu"], "wasm", "host_gpu_gaps").status == "ok"


def test_static_runtime_launch_flows_from_the_driver_call_inside(tmp_path):
    """cuBLAS/cuDNN carry their own CUDA runtime: CUPTI records its cudaLaunchKernel, which no
    uprobe sees, and the cuda family records the cuLaunchKernel that runtime makes inside it.  The
    kernel's flow starts at that driver slice (the one a Python stack is taken at), with no slice
    made from CUPTI's record; a driver call on another thread is not taken for it."""
    g = GpuLog(span_us=20_000)
    k = g.string(1, KERNEL_MANGLED)

    def static_launch(t, driver_tid):
        g.corr += 1
        g.call("cuLaunchKernel", us(t + 3), 2_000, tid=driver_tid)
        g.rec(R.API, us(t), us(t + 8), tid=TID, correlation=g.corr, domain=RUNTIME_LAUNCH)
        g.rec(R.KERNEL, us(t + 20), us(t + 90), correlation=g.corr, device=0, stream=7, name=k,
              grid=(1, 1, 1), block=(32, 1, 1))
        return g.corr

    inside = static_launch(1000, TID)
    elsewhere = static_launch(2000, WORKER)
    contained = g.launch("cudaLaunchKernel", us(3000), 10_000, [(k, us(3020), us(3100))])
    raw = g.write(tmp_path / "static.tlraw")
    out = str(tmp_path / "t.pftrace")
    convert(raw, out)
    with open_trace(out, engine="wasm") as tp:
        rows = tp.query("""select extract_arg(g.arg_set_id, 'debug.correlation_id'), c.name, c.ts, t.tid,
                                  extract_arg(c.arg_set_id, 'debug.source')
                           from slice g join flow f on f.slice_in = g.id join slice c on c.id = f.slice_out
                           join thread_track tt on c.track_id = tt.id join thread t using (utid)
                           where g.category = 'gpu_kernel'""").rows
        src = {r[0]: r[1:] for r in rows}
        assert src[inside] == ("cuLaunchKernel", us(1003), TID, None), rows
        assert src[elsewhere] == ("cudaLaunchKernel", us(2000), TID, "cupti"), rows
        assert src[contained] == ("cudaLaunchKernel", us(3000), TID, None), rows
        made = tp.query("select count(*) from slice where extract_arg(arg_set_id, 'debug.source') = 'cupti'")
        assert made.rows[0][0] == 1
        assert_one_row_per_pid_and_tid(tp)
