"""CUDA runtime, driver and NCCL calls recorded for real, read back through trace_processor.

The runtime is NVIDIA's real libcudart from PyPI (nvidia-cuda-runtime-cu12):
without a GPU driver every call returns 35 (cudaErrorInsufficientDriver), but
only after the uprobe saw its real arguments.  The driver API, NCCL and a
runtime that succeeds (for allocation counters and graph flows) are STAND-INS
built from tests/standins/*.c: the real symbol names and signatures, no GPU.
The target program is tests/standins/cuda_workload.py.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from timeline.trace_processor import open_trace
from helpers import REPO, assert_one_row_per_pid_and_tid, read_raw, require_root, timeline_cmd
from standins import build

WORKLOAD = os.path.join(REPO, "tests", "standins", "cuda_workload.py")


def real_cudart() -> str:
    import nvidia.cuda_runtime as m  # the nvidia-cuda-runtime-cu12 wheel
    path = os.path.join(list(m.__path__)[0], "lib", "libcudart.so.12")
    assert os.path.exists(path), path
    return path


def slices(tp, where: str) -> list[dict]:
    """Calls as dicts: name, category, ts, dur, tid, pid and every debug arg."""
    rows = tp.query(f"""
        select s.id, s.name, s.category, s.ts, s.dur, t.tid, p.pid, s.arg_set_id
        from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
        left join process p using (upid) where {where} order by s.ts""").as_dicts()
    out = []
    for r in rows:
        for key, iv, sv, rv in tp.query(f"""select key, int_value, string_value, real_value from args
                                           where arg_set_id = {r['arg_set_id'] or -1}""").rows:
            if key.startswith(("debug.", "args.")):
                r[key.split(".", 1)[1]] = iv if iv is not None else (sv if sv is not None else rv)
        out.append(r)
    return out


def counter(tp, name: str, pid: int) -> list[tuple[int, float]]:
    return tp.query(f"""select c.ts, c.value from counter c join process_counter_track t on c.track_id = t.id
                        join process using (upid)
                        where (t.name = '{name}' or t.name = '{name} value') and pid = {pid}
                        order by c.ts""").rows


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """One recording (full mode) converted to both formats."""
    require_root()
    d = tmp_path_factory.mktemp("cuda")
    libs = build(str(d))
    copies = []
    for sub in ("venv_a", "venv_b"):  # two more copies of libcudart: other inodes, other paths
        os.makedirs(d / sub)
        copies.append(str(shutil.copy(real_cudart(), d / sub / "libcudart.so.12")))
    raw = str(d / "full.tlraw")
    cp = timeline_cmd("record", "--raw-only", "-e", "sched,cuda", "-o", raw,
                      "--cuda-lib", libs["libcuda.so.1"], "--cuda-lib", libs["libcudart.so.12"],
                      "--cuda-lib", libs["libnccl.so.2"], "--", sys.executable, WORKLOAD, "real",
                      real_cudart(), str(d), raw, *copies, str(d))
    assert cp.returncode == 0, cp.stderr
    parent, child = (json.loads(line) for line in cp.stdout.strip().splitlines())
    tps = {}
    for fmt, name in (("perfetto", "full.pftrace"), ("chrome", "full.json")):
        cv = timeline_cmd("convert", raw, "-o", str(d / name))
        assert cv.returncode == 0, cv.stderr
        tps[fmt] = open_trace(str(d / name))
    yield {"cp": cp, "raw": raw, "parent": parent, "child": child, "tp": tps, "copies": copies, "libs": libs}
    for tp in tps.values():
        tp.close()


FMTS = pytest.mark.parametrize("fmt", ["perfetto", "chrome"])


@FMTS
def test_no_ghost_processes_or_threads(full, fmt):
    assert_one_row_per_pid_and_tid(full["tp"][fmt])


@FMTS
def test_runtime_launches_with_dims_kernel_names_and_codes(full, fmt):
    tp, par = full["tp"][fmt], full["parent"]
    calls = slices(tp, f"s.category = 'cuda' and t.tid = {par['tid']}")
    launches = [c for c in calls if c["name"] == "cudaLaunchKernel" and c["grid"] == "70000,2,3"]
    assert [c["stream"] for c in launches] == ["0xabc0", "0xabc1", "0xabc2"]
    for c in launches:
        assert (c["block"], c["shmem"], c["ret"], c["pid"]) == ("128,1,4", 4096, 35, par["pid"])
        assert c["kernel"] == "addKernel(float*, float const*, float const*, int)" and c["func"] == par["add"]
        assert c["error"] == "cudaErrorInsufficientDriver" and c["dur"] > 0
    (ptsz,) = [c for c in calls if c["name"] == "cudaLaunchKernel_ptsz"]
    assert (ptsz["grid"], ptsz["block"], ptsz["kernel"]) == ("1,1,1", "32,1,1", "void scaleKernel<float>(float*, float, int)")
    (stripped,) = [c for c in calls if c["name"] == "cudaLaunchKernel" and c["grid"] == "5,1,1"]
    assert stripped["kernel"].startswith("libkernels_stripped.so+0x") and stripped["stream"] == "0x1"
    (exc,) = [c for c in calls if c["name"] == "cudaLaunchKernelExC"]
    assert (exc["grid"], exc["block"], exc["shmem"], exc["stream"]) == ("131072,3,1", "256,2,1", 2048, "0xdef0")
    assert exc["kernel"].startswith("addKernel(")


@FMTS
def test_runtime_copies_allocs_syncs(full, fmt):
    tp, par = full["tp"][fmt], full["parent"]
    calls = slices(tp, f"s.category = 'cuda' and t.tid = {par['tid']}")
    by = lambda n: [c for c in calls if c["name"] == n]  # noqa: E731
    copies = [(c["dst"], c["src"], c["bytes"], c["kind"], c["ret"]) for c in by("cudaMemcpy")]
    assert copies == [(f"{0x1000 + k:#x}", f"{0x2000 + k:#x}", 1000 + k, kind, 35)
                      for k, kind in enumerate(["H2H", "H2D", "D2H", "D2D", "default"])]
    (a,) = by("cudaMemcpyAsync")
    assert (a["bytes"], a["kind"], a["stream"]) == (1 << 20, "D2H", "0x5150")
    (m2,) = by("cudaMemcpy2D")
    assert (m2["bytes"], m2["width"], m2["height"], m2["dpitch"], m2["spitch"], m2["kind"]) == \
        (25600, 256, 100, 512, 256, "D2D")
    (ms,) = by("cudaMemset")
    assert (ms["ptr"], ms["value"], ms["bytes"]) == ("0x7000", 0x5A, 4096)
    (mal,) = by("cudaMalloc")
    assert mal["size"] == 1 << 20 and mal["ret"] == 35 and "ptr" not in mal  # failed: no pointer
    assert by("cudaFree")[0]["ptr"] == "0x1234"
    assert by("cudaStreamSynchronize")[0]["stream"] == "0x77"
    assert by("cudaDeviceSynchronize")[0]["ret"] == 35
    assert by("cudaSetDevice")[0]["device"] == 1
    assert (by("cudaEventRecord")[0]["event"], by("cudaEventRecord")[0]["stream"]) == ("0xe1", "0x77")
    assert by("cudaStreamWaitEvent")[0]["flags"] == 0
    assert by("cudaStreamQuery")[0]["stream"] == "0x78"
    assert by("cudaGetDeviceCount")[0]["ret"] == 35 and "count" not in by("cudaGetDeviceCount")[0]
    # failed calls count toward no counter
    assert counter(tp, "cuda.allocated_bytes", par["pid"]) == []


@FMTS
def test_threads_calling_concurrently(full, fmt):
    tp, par = full["tp"][fmt], full["parent"]
    for i, tid in par["threads"].items():
        calls = slices(tp, f"s.name = 'cudaLaunchKernel' and t.tid = {tid}")
        assert len(calls) == 40
        assert {(c["grid"], c["block"], c["pid"]) for c in calls} == {(f"{1000 + int(i)},1,1", f"{int(i) + 1},1,1",
                                                                        par["pid"])}


@FMTS
def test_late_dlopen_of_two_copies(full, fmt):
    tp, par = full["tp"][fmt], full["parent"]
    for grid in ("11,1,1", "22,1,1"):
        (c,) = slices(tp, f"s.name = 'cudaLaunchKernel' and extract_arg(s.arg_set_id, '{'debug' if fmt == 'perfetto' else 'args'}.grid') = '{grid}'")
        assert c["tid"] == par["tid"] and c["kernel"].startswith("addKernel(")
    metas = [m for m in read_raw(full["raw"])["metas"] if m["type"] == "cuda_libs"]
    libs = {lib["path"]: lib for m in metas for lib in m["libs"]}
    for path in full["copies"]:
        assert libs[path]["found_by"] == f"maps of pid {par['pid']}" and libs[path]["api"] == "runtime"
    assert libs[real_cudart()]["found_by"] == "candidate"
    attached = {r[0] for r in tp.query("select name from slice where category = 'timeline'").rows}
    assert "libcudart.so.12" in attached and "libnccl.so.2" in attached
    assert "cuda: probes on" in full["cp"].stderr and full["copies"][0] in full["cp"].stderr


@FMTS
def test_driver_api_standin(full, fmt):
    tp, ch = full["tp"][fmt], full["child"]
    drv = slices(tp, f"s.category = 'cuda_driver' and p.pid = {ch['pid']}")
    # Driver calls made inside the stand-in runtime's calls are folded into them:
    # only the calls the program made itself are here.
    assert [c["name"] for c in drv] == ["cuModuleGetFunction", "cuLaunchKernel", "cuLaunchKernelEx",
                                        "cuMemAlloc_v2", "cuMemFree_v2", "cuCtxSynchronize"]
    get, launch, ex, alloc, free, _ = drv
    assert (get["function"], get["module"]) == (ch["function"], "0x3a")
    assert (launch["grid"], launch["block"], launch["shmem"], launch["stream"]) == ("100000,2,1", "256,1,4", 1024, "0x99")
    assert launch["kernel"] == "triton_poi_fused_add_0" and launch["ret"] == 0
    assert (ex["grid"], ex["block"], ex["shmem"], ex["stream"], ex["kernel"]) == \
        ("3,4,5", "6,7,8", 512, "0x42", "triton_poi_fused_add_0")
    assert (alloc["size"], alloc["ptr"]) == (7 << 20, ch["dptr"]) and free["size"] == 7 << 20
    rt = slices(tp, f"s.category = 'cuda' and p.pid = {ch['pid']}")
    launches = [c for c in rt if c["name"] == "cudaLaunchKernel"]
    assert [c["grid"] for c in launches] == [f"{2000 + i},1,1" for i in range(5)]
    assert all(c["ret"] == 0 and c["kernel"] == "0x4242" for c in launches)
    assert [c["ptr"] for c in rt if c["name"] == "cudaMalloc"] == ch["ptrs"]


@FMTS
def test_counters(full, fmt):
    tp, ch = full["tp"][fmt], full["child"]
    mib = 1 << 20
    assert [v for _, v in counter(tp, "cuda.allocated_bytes", ch["pid"])] == \
        [1 * mib, 4 * mib, 9 * mib, 6 * mib, 13 * mib, 6 * mib]
    # rates: 0.1 s bins, whatever the timing the integral is the total
    assert sum(v for _, v in counter(tp, "cuda.memcpy_bytes_per_s.H2D", ch["pid"])) * 0.1 == pytest.approx(40960)
    assert sum(v for _, v in counter(tp, "cuda.launches_per_s", ch["pid"])) * 0.1 == pytest.approx(7)
    assert sum(v for _, v in counter(tp, "cuda.graph_launches_per_s", ch["pid"])) * 0.1 == pytest.approx(3)


@FMTS
def test_graph_flows(full, fmt):
    tp, ch = full["tp"][fmt], full["child"]
    rows = tp.query("""select so.name, si.name from flow f join slice so on so.id = f.slice_out
                       join slice si on si.id = f.slice_in where so.category = 'cuda' order by so.ts""").rows
    assert rows == [("cudaStreamBeginCapture", "cudaStreamEndCapture"), ("cudaStreamEndCapture", "cudaGraphInstantiate"),
                    ("cudaGraphInstantiate", "cudaGraphLaunch"), ("cudaGraphLaunch", "cudaGraphLaunch"),
                    ("cudaGraphLaunch", "cudaGraphLaunch")]
    calls = {c["name"]: c for c in slices(tp, f"p.pid = {ch['pid']} and (s.name like 'cuda%Graph%' or s.name like '%Capture')")}
    assert calls["cudaStreamEndCapture"]["graph"] == ch["graph"] == calls["cudaGraphInstantiate"]["graph"]
    assert calls["cudaGraphInstantiate"]["exec"] == ch["exec"] == calls["cudaGraphLaunch"]["exec"]


@FMTS
def test_nccl_standin(full, fmt):
    tp, ch = full["tp"][fmt], full["child"]
    calls = slices(tp, f"s.category = 'nccl' and p.pid = {ch['pid']}")
    assert [c["name"] for c in calls] == ["ncclCommInitRank", "ncclAllReduce", "ncclReduce", "ncclAllGather",
                                          "ncclGroupStart", "ncclSend", "ncclGroupEnd"]
    init, ar, red, ag, _, send, _ = calls
    assert (init["comm"], init["nranks"], init["comm_rank"]) == (ch["comm"], 8, 3)
    assert all((c["rank"], c["world_size"], c["ret"]) == (3, 8, 0) for c in calls)  # from RANK/WORLD_SIZE
    assert (ar["count"], ar["datatype"], ar["op"], ar["comm"], ar["stream"], ar["bytes"]) == \
        (1000, "float32", "sum", ch["comm"], "0x55", 4000)
    assert (red["datatype"], red["op"], red["root"], red["stream"], red["bytes"]) == ("bfloat16", "max", 1, "0x56", 1000)
    assert (ag["count"], ag["datatype"], ag["stream"], ag["bytes"]) == (250, "int64", "0x57", 2000)
    assert (send["peer"], send["count"], send["stream"], send["comm_rank"]) == (4, 64, "0x58", 3)


@FMTS
def test_bulk_and_per_event_conversion_agree(full, fmt, tmp_path, monkeypatch):
    # the real recording, through the sinks' bulk calls and their one-event-at-a-time path
    from test_cuda_convert import convert_both_ways
    bulk, per_event = convert_both_ways(full["raw"], tmp_path, fmt, monkeypatch)
    assert len(bulk["slices"]) > 100 and bulk["flows"] and bulk["counters"]
    assert bulk == per_event


def test_nested_driver_calls_counted(full):
    stats = [m for m in read_raw(full["raw"])["metas"] if m["type"] == "cuda_stats"][-1]
    # 3 mallocs + 1 free + 5 launches + 10 copies + 1 sync + 3 graph launches in the stand-in runtime
    assert stats["nested_dropped"] == 23 and stats["lost_returns"] == 0


def test_entry_only_mode(tmp_path):
    require_root()
    libs = build(str(tmp_path))
    raw = str(tmp_path / "entry.tlraw")
    out = str(tmp_path / "entry.pftrace")
    cp = timeline_cmd("record", "-o", out, "--keep-raw", "-e", "cuda", "--cuda-mode", "entry-only",
                      "--cuda-lib", libs["libcuda.so.1"], "--cuda-lib", libs["libcudart.so.12"], "--",
                      sys.executable, WORKLOAD, "entry", real_cudart(), str(tmp_path), str(tmp_path), raw)
    assert cp.returncode == 0, cp.stderr
    info = json.loads(cp.stdout)
    with open_trace(out) as tp:
        calls = slices(tp, f"t.tid = {info['tid']} and s.category like 'cuda%'")
    real = [c for c in calls if c["name"] == "cudaLaunchKernel" and c["stream"] == "0x20"]
    assert [c["grid"] for c in real] == [f"{300 + i},1,1" for i in range(5)]
    assert all(c["dur"] == 0 and "ret" not in c and c["shmem"] == 16 for c in real)
    assert real[0]["kernel"].startswith("addKernel(")
    stand = [c["grid"] for c in calls if c["name"] == "cudaLaunchKernel" and c["stream"] == "0x21"]
    assert stand == [f"{400 + i},1,1" for i in range(20)]
    # the stand-in runtime's own cuLaunchKernel calls are folded; direct ones stay.
    # Entry-only folding is a 2 ms window: tolerate one thread preempted longer in between.
    drv = [c["grid"] for c in calls if c["name"] == "cuLaunchKernel"]
    assert [g for g in drv if g.startswith("5")] == [f"{500 + i},1,1" for i in range(7)]
    assert len(drv) - 7 <= 1
    (mal,) = [c for c in calls if c["name"] == "cudaMalloc"]  # not a launch: still entry + return
    assert mal["ret"] == 0 and mal["ptr"] == info["ptr"] and mal["dur"] > 0


def test_attach_to_running_process(tmp_path):
    require_root()
    build(str(tmp_path))
    stop = str(tmp_path / "stop")
    proc = subprocess.Popen([sys.executable, WORKLOAD, "loop", real_cudart(), str(tmp_path), stop],
                            stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        out = str(tmp_path / "attach.json")
        cp = timeline_cmd("record", "--pid", str(info["pid"]), "--duration", "1.5", "-e", "cuda", "-o", out)
        assert cp.returncode == 0, cp.stderr
    finally:
        open(stop, "w").close()
        proc.wait(timeout=30)
    with open_trace(out) as tp:
        calls = slices(tp, "s.name = 'cudaLaunchKernel'")
    assert len(calls) >= 10
    assert {(c["tid"], c["grid"], c["block"], c["ret"]) for c in calls} == {(info["tid"], "777,1,1", "7,1,1", 35)}
    assert all(c["kernel"].startswith("addKernel(") for c in calls)
