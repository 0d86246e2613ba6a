"""Target of the diff's GPU test (stand-in CUDA libraries, tests/standins):
N steps, each an NVTX range 'step' holding K kernel launches, a copy each
way and a stream sync, then SLEEP_MS of host work.

    python gpu_steps.py DIR N K SLEEP_MS
"""
import ctypes
import os
import sys
import time
from ctypes import byref, c_size_t, c_void_p

from cuda_workload import dim3, load

P = c_void_p


def main() -> None:
    d, n, k, sleep_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    rt = load(os.path.join(d, "libcudart.so.12"))
    drv = load(os.path.join(d, "libcuda.so.1"))
    nv = ctypes.CDLL(os.path.join(d, "libnvtx_caller.so"))
    nv.nvtx_push.argtypes = [ctypes.c_char_p]
    drv.cuStreamSynchronize.argtypes = [P]
    rt.cudaMemcpyAsync.argtypes = [P, P, c_size_t, ctypes.c_int, P]
    stream = P(0x5000)
    dev = P()
    rt.cudaMalloc(byref(dev), 1 << 20)  # cuInit: the injection library starts
    host = ctypes.create_string_buffer(1 << 16)
    fn = P(0xf00d)
    for _ in range(n):
        nv.nvtx_push(b"step")
        for _ in range(k):
            rt.cudaLaunchKernel(fn, dim3(4, 1, 1), dim3(64, 1, 1), None, 0, stream)
        rt.cudaMemcpyAsync(dev, host, 1 << 16, 1, stream)
        rt.cudaMemcpyAsync(host, dev, 64, 2, stream)
        drv.cuStreamSynchronize(stream)
        time.sleep(sleep_ms / 1e3)
        nv.nvtx_pop()
    print("done", flush=True)


if __name__ == "__main__":
    main()
