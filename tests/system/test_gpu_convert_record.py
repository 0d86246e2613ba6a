"""A recorded stand-in GPU workload converts with every flow. Synthetic ring-7 logs:
tests/unit/test_gpu_convert.py.
"""
from __future__ import annotations

from helpers import assert_one_row_per_pid_and_tid
from timeline.converters import convert
from timeline.trace_processor import open_trace


# -- end to end on the stand-ins: `timeline record -e sched,cuda,gpu` of tests/standins/gpu_workload.py
def test_recorded_standin_workload_converts_with_every_flow(tmp_path):
    """STAND-INS (no GPU here): the stand-in driver loads the injection library, a stand-in libcupti
    fills its buffers with real-layout records; the cuda family probes the stand-in runtime/driver.
    Every kernel, copy and memset has a flow from the call that caused it, on the calling thread."""
    import json
    import os
    import sys

    from helpers import REPO, require_root, timeline_cmd
    from standins import build_gpu

    require_root()
    libs = build_gpu(str(tmp_path))
    raw = str(tmp_path / "basic.tlraw")
    cuda_args = [a for lib in ("libcuda.so.1", "libcudart.so.12", "libnccl.so.2") for a in ("--cuda-lib", libs[lib])]
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "tests", "standins"))
    for k in ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "TIMELINE_GPU_SOCKET", "TIMELINE_CUPTI_PATH"):
        env.pop(k, None)
    cp = timeline_cmd("record", "--raw-only", "-e", "sched,cuda,gpu", *cuda_args, "-o", raw, "--", sys.executable,
                      os.path.join(REPO, "tests", "standins", "gpu_workload.py"),
                      os.path.dirname(libs["libcudart.so.12"]), "basic", "10", env=env)
    assert cp.returncode == 0, cp.stderr
    tid = json.loads(cp.stdout.splitlines()[0])["tid"]
    for out, ns in (("basic.pftrace", "debug"), ("basic.json", "args")):
        convert(raw, str(tmp_path / out))
        with open_trace(str(tmp_path / out), engine="wasm") as tp:
            assert_one_row_per_pid_and_tid(tp)
            rows = tp.query("""select g.name, g.category, c.name, c.category, t.tid from slice g
                                left join flow f on f.slice_in = g.id left join slice c on c.id = f.slice_out
                                left join thread_track tt on c.track_id = tt.id left join thread t using (utid)
                                where g.category glob 'gpu_*'""").rows
            cats = {r[1] for r in rows}
            assert cats == {"gpu_kernel", "gpu_memcpy", "gpu_memset"}, rows
            assert all(r[2] is not None and r[3] in ("cuda", "cuda_driver") and r[4] == tid for r in rows), rows
            assert sum(r[2] == "cudaLaunchKernel" for r in rows) == 10
            nvtx = dict(tp.query("select name, depth from slice where category = 'nvtx'").rows)
            assert nvtx["level1"] == nvtx["level0"] + 1 and nvtx["level2"] == nvtx["level0"] + 2
            tracks = {r[0] for r in tp.query("""select distinct t.name from slice s join thread_track tt
                      on s.track_id = tt.id join thread t using (utid) where s.category glob 'gpu_*'""").rows} \
                if ns == "args" else {r[0] for r in tp.query("""select distinct t.name from slice s
                      join track t on s.track_id = t.id where s.category glob 'gpu_*'""").rows}
            assert tracks and all(t.startswith("GPU 0 \u00b7 stream ") for t in tracks), tracks


def test_library_launches_flow_from_the_driver_call_with_its_python_stack(tmp_path):
    """STAND-INS: a library with its own CUDA runtime (as cuBLAS and cuDNN) launches through the driver
    API; CUPTI records the runtime call, which no uprobe sees, and the cuda family records the
    cuLaunchKernel inside it.  Every library kernel's flow starts at that cuLaunchKernel slice, which
    carries the Python line that called the library (--py-launch-every 1); no slice is made from
    CUPTI's.  Each library call follows a runtime launch of the same thread (as torch's elementwise
    kernels and cuBLAS GEMMs alternate) and launches from deeper on the stack: it is still a launch of
    its own, not one nested in that runtime launch (on an H100, 2,000 such launches got 1 stack)."""
    import json
    import os
    import sys

    from helpers import REPO, require_root, timeline_cmd
    from standins import build_gpu
    from test_cuda_record import slices

    require_root()
    libs = build_gpu(str(tmp_path))
    raw, trace = str(tmp_path / "lib.tlraw"), str(tmp_path / "lib.pftrace")
    n = 12
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "tests", "standins"))
    for k in ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "TIMELINE_GPU_SOCKET", "TIMELINE_CUPTI_PATH"):
        env.pop(k, None)
    cp = timeline_cmd("record", "--raw-only", "-e", "sched,cuda,gpu,pystack", "--py-sample-hz", "0",
                      "--py-launch-every", "1", "--cuda-lib", libs["libcuda.so.1"],
                      "--cuda-lib", libs["libcudart.so.12"],  # probed from the start: the target calls it at once
                      "-o", raw, "--", sys.executable, os.path.join(REPO, "tests", "standins", "gpu_workload.py"),
                      os.path.dirname(libs["libcudart.so.12"]), "library", str(n), env=env)
    assert cp.returncode == 0, cp.stderr
    info = json.loads(cp.stdout.splitlines()[0])
    convert(raw, trace)
    with open_trace(trace, engine="wasm") as tp:
        rows = tp.query("""select c.id, c.name, extract_arg(c.arg_set_id, 'debug.source') from slice g
                           join flow f on f.slice_in = g.id join slice c on c.id = f.slice_out
                           where g.category = 'gpu_kernel'""").rows
        assert sorted((r[1], r[2]) for r in rows) == [("cuLaunchKernel", None)] * n + [("cudaLaunchKernel", None)] * n
        for name, line in (("cuLaunchKernel", info["library_line"]), ("cudaLaunchKernel", info["runtime_line"])):
            calls = {r["id"]: r for r in slices(tp, f"s.name = '{name}' and t.tid = {info['tid']}")}
            assert {r[0] for r in rows if r[1] == name} <= set(calls)
            where = f"gpu_workload.py:{line} library_calls \u2190 "
            assert all(calls[r[0]].get("py", "").startswith(where) for r in rows if r[1] == name), \
                (name, [c.get("py") for c in calls.values()])
        made = tp.query("select count(*) from slice where extract_arg(arg_set_id, 'debug.source') = 'cupti'")
        assert made.rows[0][0] == 0
