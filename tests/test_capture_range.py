"""--capture-range cudaProfilerApi: recording on only between the target's
cudaProfilerStart() and cudaProfilerStop(), probed in NVIDIA's real libcudart
(no GPU: each call returns 35, after its uprobe saw it)."""
import os
import sys
import textwrap

from helpers import REPO, read_raw, require_root, timeline_cmd
from timeline import events
from timeline.trace_processor import open_trace

sys.path.insert(0, os.path.join(REPO, "tests"))
from test_cuda_record import real_cudart, slices  # noqa: E402

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
    assert len(log["proc"][log["proc"]["kind"] == events.PROC_EXEC]) >= 1  # the tree is whole


def test_capture_range_needs_the_cuda_family(tmp_path):
    require_root()
    cp = timeline_cmd("record", "-e", "sched", "--capture-range", "cudaProfilerApi", "-o",
                      str(tmp_path / "x.pftrace"), "--", "true")
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and "needs the cuda family" in cp.stderr, cp.stderr
    cp = timeline_cmd("record", "--delay", "1", "--capture-range", "cudaProfilerApi", "-o",
                      str(tmp_path / "x.pftrace"), "--", "true")
    assert cp.returncode == 2 and "use one" in cp.stderr and "Traceback" not in cp.stderr, cp.stderr


def test_bookkeeping_records_are_kept_outside_the_window():
    """Kernel registrations (at library load) name the kernels launched inside
    a later window: the window keeps them, and drops the calls around them."""
    import numpy as np

    from timeline.capture import NEVER, CaptureWindow
    from timeline.cuda.family import CudaOptions
    from timeline.cuda.plugin import CudaPlugin
    from timeline.cuda.probes import BY_NAME

    recs = np.zeros(4, events.CUDA_EVENT)
    recs["ts"] = [100, 200, 300, 400]
    recs["kind"] = events.CUDA_CALL
    recs["cookie"] = [BY_NAME["__cudaRegisterFunction"].cookie(), BY_NAME["cudaLaunchKernel"].cookie(),
                      BY_NAME["cudaProfilerStart"].cookie(), BY_NAME["cudaLaunchKernel"].cookie()]
    data = events.encode_ring_bytes(recs)
    stride = events.ring_stride(events.CUDA_EVENT)
    plugin = CudaPlugin(None, CudaOptions(capture_range="cudaProfilerApi"))
    from timeline.capture import as_rows
    marks = plugin.capture_marks(events.RING_CUDA, as_rows(data, stride))
    assert marks == [(300, True)]
    window = CaptureWindow(NEVER)
    for ts, on in marks:
        window.set_on(ts) if on else window.set_off(ts)
    kept = events.decode_ring_bytes(window.keep(events.RING_CUDA, data, stride, plugin.always_keep),
                                    events.CUDA_EVENT)
    assert kept["ts"].tolist() == [100, 300, 400]  # the registration, then the range
