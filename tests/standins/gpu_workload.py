"""Target program of the injection-library tests (stand-in CUDA driver/runtime/CUPTI).

    python gpu_workload.py DIR MODE [N]

DIR holds the stand-in libraries (tests/standins build_gpu).  MODE:
    basic   runtime + driver launches, copies (HtoD, DtoH, peer), memset, syncs,
            a graph launch, NVTX ranges (nested, start/end, domain, wide)
    crash   N launches, waits past the periodic flush, then abort()s
    fork    NVTX + launches, then a forked child makes its own NVTX ranges
    nvtx    NVTX only (no CUDA call: cuInit never runs)
    deep    N nested NVTX push/pop
    bench   N cudaLaunchKernel calls; prints launches/s
    library N rounds of a runtime launch and a launch by a library with its own CUDA
            runtime (as cuBLAS), from library_calls(); the JSON names the two calling lines
            ("runtime_line", "library_line")
Prints one JSON line: pid, tid, window [t0, t1] in CLOCK_BOOTTIME ns, and what it did.
"""
import ctypes
import json
import os
import sys
import threading
import time
from ctypes import byref, c_size_t, c_ulonglong, c_void_p

from cuda_workload import dim3, load

P = c_void_p


def boottime() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def library_calls(lib, rt, n: int, stream) -> tuple[int, int]:
    """n rounds of a runtime launch then a launch through the library, as torch launches an
    elementwise kernel and then a cuBLAS GEMM; returns the two lines that launch."""
    fn, g, b = P(0xf00d), dim3(1, 1, 1), dim3(32, 1, 1)
    for _ in range(n):
        rt.cudaLaunchKernel(fn, g, b, None, 0, stream)
        lib.standin_library_gemm(P(0xbeef), stream)
    first = library_calls.__code__.co_firstlineno
    return first + 5, first + 6


def main() -> None:
    d, mode = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    out = {"pid": os.getpid(), "tid": threading.get_native_id(), "t0": boottime()}
    if os.environ.get("GPU_WORKLOAD_PRELOAD_CUPTI"):  # as torch's Kineto does at import
        ctypes.CDLL(os.environ["GPU_WORKLOAD_PRELOAD_CUPTI"])
    rt = load(os.path.join(d, "libcudart.so.12"))
    drv = load(os.path.join(d, "libcuda.so.1"))
    nv = ctypes.CDLL(os.path.join(d, "libnvtx_caller.so"))
    nv.nvtx_start.restype = c_ulonglong
    nv.nvtx_end.argtypes = [c_ulonglong]
    nv.nvtx_push.argtypes = [ctypes.c_char_p]
    nv.nvtx_start.argtypes = [ctypes.c_char_p]
    drv.cuMemsetD8Async.argtypes = [c_ulonglong, ctypes.c_ubyte, c_size_t, P]
    drv.cuMemcpyPeerAsync.argtypes = [c_ulonglong, P, c_ulonglong, P, c_size_t, P]
    drv.cuStreamSynchronize.argtypes = [P]
    stream = P(0x5000)
    if mode == "nvtx":
        nv.nvtx_nested(3)
    elif mode == "deep":  # n nested ranges: deeper than the library's per-thread stack
        for i in range(n):
            nv.nvtx_push(b"d%d" % i)
        for i in range(n):
            nv.nvtx_pop()
    elif mode == "library":
        time.sleep(0.2)  # a real job imports for a while first: the recorder finds its interpreter
        lib = ctypes.CDLL(os.path.join(d, "libstatic_runtime.so"))
        lib.standin_library_gemm.argtypes = [P, P]
        dev = P()
        rt.cudaMalloc(byref(dev), 1 << 20)
        out["runtime_line"], out["library_line"] = library_calls(lib, rt, n, stream)
        time.sleep(0.3)  # the recorder names new code objects while the process lives
    elif mode == "bench":
        dev = P()
        rt.cudaMalloc(byref(dev), 1 << 20)
        fn = P(0xf00d)
        g, b = dim3(1, 1, 1), dim3(32, 1, 1)
        t = time.perf_counter()
        for _ in range(n):
            rt.cudaLaunchKernel(fn, g, b, None, 0, None)
        out["launches_per_s"] = n / (time.perf_counter() - t)
    else:
        dev = P()
        rt.cudaMalloc(byref(dev), 1 << 20)  # first runtime call: cuInit loads the injection library
        fn = P(0xf00d)
        for i in range(n):
            rt.cudaLaunchKernel(fn, dim3(i + 1, 2, 3), dim3(64, 4, 1), None, 256, stream)
        if mode == "crash":
            nv.nvtx_nested(2)  # ends ranges in this thread's batch; only a periodic flush sends them
            time.sleep(0.8)  # > the 200 ms flush period: these records are out before the crash
            out["t1"] = boottime()
            print(json.dumps(out), flush=True)
            os.abort()
        hfn = P()
        drv.cuModuleGetFunction(byref(hfn), P(0x1234), b"_Z10my_matmulPfS_")
        drv.cuLaunchKernel(hfn, 7, 1, 1, 128, 1, 1, 0, None, None, None)
        host = ctypes.create_string_buffer(4096)
        rt.cudaMemcpyAsync(dev, host, 4096, 1, stream)       # HtoD, runtime
        rt.cudaMemcpyAsync(host, dev, 2048, 2, stream)       # DtoH, runtime
        drv.cuMemsetD8Async(dev.value, 0x5A, 1000, stream)
        drv.cuMemcpyPeerAsync(dev.value, None, dev.value, None, 8192, stream)
        drv.cuStreamSynchronize(stream)
        drv.cuCtxSynchronize()
        drv.cuGraphLaunch(P(0x4200), stream)
        nv.nvtx_nested(3)
        rid = nv.nvtx_start(b"startend")
        nv.nvtx_end(rid)
        nv.nvtx_domain()
        nv.nvtx_wide()
        nv.nvtx_push(b"left_open")  # still open at exit
        if mode == "fork":
            r, w = os.pipe()
            child = os.fork()
            if child == 0:
                if os.environ.get("GPU_WORKLOAD_CHILD_NVTX", "1") == "1":
                    nv.nvtx_push(b"child_range")
                    nv.nvtx_pop()
                os.write(w, json.dumps({"pid": os.getpid(), "tid": threading.get_native_id()}).encode())
                sys.exit(0)  # normal exit: atexit handlers run, as in a DataLoader worker
            os.close(w)
            os.waitpid(child, 0)
            out["child"] = json.loads(os.read(r, 4096))
    out["t1"] = boottime()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
