"""CUDA 12 check target for bench/gpu_truth.py: real libcudart.so.12 calls, no kernels.

    python bench/gpu_truth_cu12.py PATH/libcudart.so.12 [STEPS]

Per step: cudaMalloc, a 1 MiB host-to-device copy, a memset (when the library has
cudaMemsetAsync), a 4 KiB device-to-host copy, all on the default stream, then a
device sync and cudaFree.  Only the default stream (0): a made-up stream handle
would crash NVIDIA's runtime.  Prints one JSON line with the return codes seen.
"""
import ctypes
import json
import sys
import time
from ctypes import byref, c_int, c_size_t, c_void_p


def main() -> None:
    rt = ctypes.CDLL(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    P = c_void_p
    for fn, args in {"cudaMalloc": [P, c_size_t], "cudaFree": [P], "cudaDeviceSynchronize": [],
                     "cudaMemcpyAsync": [P, P, c_size_t, c_int, P]}.items():
        getattr(rt, fn).argtypes, getattr(rt, fn).restype = args, c_int
    memset = getattr(rt, "cudaMemsetAsync", None)
    if memset is not None:
        memset.argtypes, memset.restype = [P, c_int, c_size_t, P], c_int
    host = ctypes.create_string_buffer(1 << 20)
    codes: dict = {}
    t0 = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    for _ in range(steps):
        dev = P(0)
        for name, rc in (("cudaMalloc", rt.cudaMalloc(byref(dev), 1 << 20)),):
            codes.setdefault(name, set()).add(rc)
        if not dev.value:
            break
        codes.setdefault("cudaMemcpyAsync", set()).add(rt.cudaMemcpyAsync(dev, host, 1 << 20, 1, None))
        if memset is not None:
            codes.setdefault("cudaMemsetAsync", set()).add(memset(dev, 0, 4096, None))
        codes.setdefault("cudaMemcpyAsync", set()).add(rt.cudaMemcpyAsync(host, dev, 4096, 2, None))
        codes.setdefault("cudaDeviceSynchronize", set()).add(rt.cudaDeviceSynchronize())
        rt.cudaFree(dev)
        time.sleep(0.01)
    t1 = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    print(json.dumps({"steps": steps, "codes": {k: sorted(v) for k, v in codes.items()}, "window": [t0, t1]}),
          flush=True)


if __name__ == "__main__":
    main()
