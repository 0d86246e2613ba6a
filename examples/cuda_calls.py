"""CUDA runtime calls from two threads, with NVIDIA's real libcudart, no GPU needed.

    sudo timeline record -o cuda.pftrace -- python examples/cuda_calls.py

Loads libcudart.so.12 from the nvidia-cuda-runtime-cu12 wheel and makes the
calls a training step makes: allocations, host-to-device copies, kernel
launches, a device-to-host copy, stream and device syncs, and a CUDA graph
captured, instantiated and launched.  Without a GPU driver every call returns
35 (cudaErrorInsufficientDriver), but the recorder still sees each call with
its real arguments, on the thread that made it.

There are no real kernels without a GPU, so the "kernels" launched are host
functions of libstdc++ (a kernel launch passes a host-side function address;
the recorder names it from the library's symbols and demangles it): the trace
shows e.g. `std::chrono::_V2::system_clock::now()` as the kernel name.
"""
import ctypes
import glob
import os
import sys
import threading
import time
from ctypes import byref, c_int, c_size_t, c_uint, c_ulonglong, c_void_p

STEPS = 20          # per thread
STEP_SECONDS = 0.05


class dim3(ctypes.Structure):
    _fields_ = [("x", c_uint), ("y", c_uint), ("z", c_uint)]


def load_cudart():
    try:
        import nvidia.cuda_runtime as pkg
        paths = glob.glob(os.path.join(list(pkg.__path__)[0], "lib", "libcudart.so.*"))
    except ImportError:
        paths = []
    for name in paths + ["libcudart.so.12", "libcudart.so"]:
        try:
            rt = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        sys.exit("libcudart not found: pip install nvidia-cuda-runtime-cu12")
    P = c_void_p
    for fn, args in {
        "cudaSetDevice": [c_int], "cudaMalloc": [P, c_size_t], "cudaFree": [P],
        "cudaMemcpy": [P, P, c_size_t, c_int], "cudaMemcpyAsync": [P, P, c_size_t, c_int, P],
        "cudaLaunchKernel": [P, dim3, dim3, P, c_size_t, P], "cudaStreamSynchronize": [P],
        "cudaDeviceSynchronize": [], "cudaStreamBeginCapture": [P, c_int], "cudaStreamEndCapture": [P, P],
        "cudaGraphInstantiate": [P, P, c_ulonglong], "cudaGraphLaunch": [P, P], "cudaMemsetAsync": [P, c_int, c_size_t, P],
    }.items():
        getattr(rt, fn).argtypes = args
        getattr(rt, fn).restype = c_int
    return rt


def kernels():
    """Host functions standing in for kernels (see the module docstring)."""
    cxx = ctypes.CDLL("libstdc++.so.6")
    return [ctypes.cast(getattr(cxx, n), c_void_p).value
            for n in ("_ZNSt6chrono3_V212system_clock3nowEv", "_ZNSt6thread20hardware_concurrencyEv")]


def name_thread(name: str) -> None:
    ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: shown in the trace


def step_loop(rt, name: str, stream: int, codes: dict) -> None:
    name_thread(name)
    k_fwd, k_bwd = kernels()
    host = ctypes.create_string_buffer(1 << 20)
    for step in range(STEPS):
        dev = c_void_p(0)
        codes.setdefault(rt.cudaMalloc(byref(dev), 64 << 20), 0)
        rt.cudaMemcpyAsync(dev, host, 1 << 20, 1, stream)                     # H2D batch
        rt.cudaMemsetAsync(dev, 0, 4096, stream)
        rt.cudaLaunchKernel(k_fwd, dim3(65536 + 4096 * step, 2, 1), dim3(256, 1, 1), None, 0, stream)
        rt.cudaLaunchKernel(k_bwd, dim3(1024, 1, 1), dim3(128, 4, 1), None, 48 << 10, stream)
        rt.cudaMemcpy(host, dev, 4096, 2)                                      # D2H loss
        rt.cudaStreamSynchronize(stream)
        rt.cudaFree(dev)
        if step % 10 == 0:  # CUDA graph: capture once, replay
            graph, exe = c_void_p(0), c_void_p(0)
            rt.cudaStreamBeginCapture(stream, 0)
            rt.cudaLaunchKernel(k_fwd, dim3(8, 1, 1), dim3(32, 1, 1), None, 0, stream)
            rt.cudaStreamEndCapture(stream, byref(graph))
            rt.cudaGraphInstantiate(byref(exe), graph, 0)
            for _ in range(3):
                rt.cudaGraphLaunch(exe, stream)
        time.sleep(STEP_SECONDS)
    rt.cudaDeviceSynchronize()


def main() -> None:
    rt = load_cudart()
    rt.cudaSetDevice(0)
    codes: dict = {}
    threads = [threading.Thread(target=step_loop, args=(rt, name, stream, codes))
               for name, stream in (("trainer", 0x1000), ("prefetcher", 0x2000))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"cuda_calls: {2 * STEPS} steps done; cudaMalloc returned {sorted(codes)}"
          + (" (35 = no GPU driver, expected here)" if 35 in codes else ""))


if __name__ == "__main__":
    main()
