"""--capture-range cudaProfilerApi: recording on only between the target's
cudaProfilerStart() and cudaProfilerStop(), probed in NVIDIA's real libcudart
(no GPU: each call returns 35, after its uprobe saw it)."""
import os
import sys
import textwrap

from helpers import REPO, read_raw, require_root, timeline_cmd
from timeline import proc_records
from timeline.trace_processor import open_trace

from test_cuda_record import real_cudart, slices

WORKLOAD = textwrap.dedent("""
    import sys, time, ctypes
    sys.path.insert(0, sys.argv[2])
    from cuda_workload import dim3, load
    rt = load(sys.argv[1])
    def launches(grid):
        for _ in range(3):
            rt.cudaLaunchKernel(ctypes.c_void_p(0xf00d), dim3(grid, 1, 1), dim3(32, 1, 1), None, 0, None)
    launches(1)                      # before: not recorded
    time.sleep(0.05)
    rt.cudaProfilerStart()
    launches(2)                      # inside the first range
    time.sleep(0.02)                 # switches inside it
    rt.cudaProfilerStop()
    time.sleep(0.05)
    launches(3)                      # between: not recorded
    rt.cudaProfilerStart()
    launches(4)                      # the second range
    time.sleep(0.02)
    rt.cudaProfilerStop()
    launches(5)                      # after: not recorded
    print("done", flush=True)
""")


def test_profiler_api_bounds_the_recording(tmp_path):
    require_root()
    raw, out = str(tmp_path / "r.tlraw"), str(tmp_path / "r.pftrace")
    cp = timeline_cmd("record", "--keep-raw", "--capture-range", "cudaProfilerApi", "-o", out, "--",
                      sys.executable, "-c", WORKLOAD, real_cudart(), os.path.join(REPO, "tests", "standins"))
    assert cp.returncode == 0 and "done" in cp.stdout, cp.stderr
    raw = out[: -len(".pftrace")] + ".tlraw"
    log = read_raw(raw)
    caps = [m for m in log["metas"] if m.get("type") == "capture"]
    assert caps[0] == {"type": "capture", "range": "cudaProfilerApi"}
    edges = [(("on" in m), m.get("on", m.get("off"))) for m in caps[1:]]
    assert [on for on, _ in edges] == [True, False, True, False], caps
    with open_trace(out) as tp:
        grids = [c["grid"] for c in slices(tp, "s.name = 'cudaLaunchKernel'")]
        assert grids == ["2,1,1"] * 3 + ["4,1,1"] * 3, grids
        starts = slices(tp, "s.name = 'cudaProfilerStart'")
        assert len(starts) == 2 and not slices(tp, "s.name = 'cudaProfilerStop'")  # off from the stop call on
    # nothing but the process tree from outside the ranges
    (a, b), (c, d) = [(edges[i][1], edges[i + 1][1]) for i in (0, 2)]
    sched = log["sched"]
    inside = ((sched["ts"] >= a) & (sched["ts"] < b)) | ((sched["ts"] >= c) & (sched["ts"] < d))
    assert len(sched) and inside.all()
    assert len(log["proc"][log["proc"]["kind"] == proc_records.PROC_EXEC]) >= 1  # the tree is whole


def test_capture_range_needs_the_cuda_family(tmp_path):
    require_root()
    cp = timeline_cmd("record", "-e", "sched", "--capture-range", "cudaProfilerApi", "-o",
                      str(tmp_path / "x.pftrace"), "--", "true")
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and "needs the cuda family" in cp.stderr, cp.stderr
    cp = timeline_cmd("record", "--delay", "1", "--capture-range", "cudaProfilerApi", "-o",
                      str(tmp_path / "x.pftrace"), "--", "true")
    assert cp.returncode == 2 and "use one" in cp.stderr and "Traceback" not in cp.stderr, cp.stderr


NVTX_WORKLOAD = textwrap.dedent("""
    import os, sys, time, ctypes
    sys.path.insert(0, sys.argv[2])
    from cuda_workload import dim3, load
    d = sys.argv[1]
    rt = load(os.path.join(d, "libcudart.so.12"))
    load(os.path.join(d, "libcuda.so.1"))
    nv = ctypes.CDLL(os.path.join(d, "libnvtx_caller.so"))
    nv.nvtx_push.argtypes = [ctypes.c_char_p]
    dev = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(dev), 1 << 20)          # cuInit: the injection library starts
    def launches(grid):
        for _ in range(3):
            rt.cudaLaunchKernel(ctypes.c_void_p(0xf00d), dim3(grid, 1, 1), dim3(32, 1, 1), None, 0, None)
        time.sleep(0.05)
    launches(1)                      # before the first "train" range
    nv.nvtx_push(b"train"); launches(2); nv.nvtx_pop()
    launches(3)                      # between two instances: kept (first start to last end)
    nv.nvtx_push(b"train"); launches(4); nv.nvtx_pop()
    launches(5)                      # after the last: left out
    time.sleep(0.5)                  # past the library's flush
    print("done", flush=True)
""")


def test_nvtx_range_bounds_the_trace(tmp_path):
    """--capture-range nvtx:train, through the stand-in driver/CUPTI and the real
    NVTX loader: from the first "train" range's start to the last one's end."""
    from standins import build_gpu
    require_root()
    libs = build_gpu(str(tmp_path / "libs"))
    d = os.path.dirname(libs["libcudart.so.12"])
    out = str(tmp_path / "n.pftrace")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "tests", "standins"))
    for k in ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "TIMELINE_GPU_SOCKET"):
        env.pop(k, None)
    cp = timeline_cmd("record", "--keep-raw", "--capture-range", "nvtx:train", "--cuda-lib", libs["libcudart.so.12"],
                      "-o", out, "--", sys.executable, "-c", NVTX_WORKLOAD, d, os.path.join(REPO, "tests", "standins"),
                      env=env)
    assert cp.returncode == 0 and "done" in cp.stdout, cp.stderr
    assert "capture range nvtx:train:" in cp.stderr, cp.stderr
    with open_trace(out) as tp:
        grids = sorted({c["grid"] for c in slices(tp, "s.name = 'cudaLaunchKernel'")})
        assert grids == ["2,1,1", "3,1,1", "4,1,1"], grids
        ranges = [r[0] for r in tp.query("select name from slice where category = 'nvtx' order by ts").rows]
        assert ranges == ["train", "train"], ranges
        kernels = tp.query("select count(*) from slice where category = 'gpu_kernel'").rows[0][0]
        assert kernels == 9  # the GPU side of the same three batches
    # the raw log keeps everything: the cut is the conversion's
    raw = out[: -len(".pftrace")] + ".tlraw"
    log = read_raw(raw)
    assert any(m.get("range") == "nvtx:train" for m in log["metas"] if m.get("type") == "capture")


def test_nvtx_capture_range_needs_the_gpu_family(tmp_path):
    require_root()
    cp = timeline_cmd("record", "-e", "sched,cuda", "--capture-range", "nvtx:train", "-o",
                      str(tmp_path / "x.pftrace"), "--", "true")
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and "needs the gpu family" in cp.stderr, cp.stderr
    cp = timeline_cmd("record", "--capture-range", "nvtx:", "-o", str(tmp_path / "x.pftrace"), "--", "true")
    assert cp.returncode == 2 and "expected none, cudaProfilerApi or nvtx:NAME" in cp.stderr, cp.stderr
