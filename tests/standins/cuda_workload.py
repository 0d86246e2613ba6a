"""Target program of the CUDA tests: calls CUDA/NCCL functions with known arguments.

    python cuda_workload.py real CUDART KDIR RAW COPY_A COPY_B STANDIN_DIR
        the real libcudart (every call returns 35 without a driver), kernel
        stubs from KDIR, two copies of libcudart dlopen'ed late, threads, then
        the `standin` part in a child process
    python cuda_workload.py standin DIR RAW       stand-in runtime/driver/NCCL
    python cuda_workload.py entry CUDART KDIR DIR RAW   the entry-only run
    python cuda_workload.py loop CUDART KDIR STOPFILE   attach-mode target

Prints one JSON line per process with what the test needs to compare (pids,
tids, pointers).  Before exiting, each process waits until the recorder has
written its mapping snapshot into the raw log RAW, so kernel names and rank
are resolvable however loaded the machine is.
"""
import ctypes
import json
import os
import subprocess
import sys
import threading
import time
from ctypes import POINTER, byref, c_char, c_int, c_size_t, c_uint, c_uint64, c_ulonglong, c_void_p

P = c_void_p


class dim3(ctypes.Structure):
    _fields_ = [("x", c_uint), ("y", c_uint), ("z", c_uint)]


class LaunchConfig(ctypes.Structure):  # cudaLaunchConfig_t
    _fields_ = [("grid", dim3), ("block", dim3), ("shmem", c_size_t), ("stream", P), ("attrs", P), ("nattrs", c_uint)]


class CuLaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gx", c_uint), ("gy", c_uint), ("gz", c_uint), ("bx", c_uint), ("by", c_uint), ("bz", c_uint),
                ("shmem", c_uint), ("stream", P), ("attrs", P), ("nattrs", c_uint)]


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", c_char * 128)]


SIGS = {
    "cudaLaunchKernel": [P, dim3, dim3, P, c_size_t, P], "cudaLaunchKernel_ptsz": [P, dim3, dim3, P, c_size_t, P],
    "cudaLaunchKernelExC": [POINTER(LaunchConfig), P, P],
    "cudaMemcpy": [P, P, c_size_t, c_int], "cudaMemcpyAsync": [P, P, c_size_t, c_int, P],
    "cudaMemcpy2D": [P, c_size_t, P, c_size_t, c_size_t, c_size_t, c_int],
    "cudaMemset": [P, c_int, c_size_t], "cudaMalloc": [P, c_size_t], "cudaFree": [P],
    "cudaStreamSynchronize": [P], "cudaDeviceSynchronize": [], "cudaSetDevice": [c_int], "cudaStreamQuery": [P],
    "cudaGetDeviceCount": [P],
    "cudaEventRecord": [P, P], "cudaStreamWaitEvent": [P, P, c_uint],
    "cudaStreamBeginCapture": [P, c_int], "cudaStreamEndCapture": [P, P],
    "cudaGraphInstantiate": [P, P, c_ulonglong], "cudaGraphLaunch": [P, P],
    "cuLaunchKernel": [P, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, P, P, P],
    "cuLaunchKernelEx": [POINTER(CuLaunchConfig), P, P, P], "cuModuleGetFunction": [P, P, ctypes.c_char_p],
    "cuMemAlloc_v2": [P, c_size_t], "cuMemFree_v2": [c_uint64], "cuCtxSynchronize": [],
    "ncclCommInitRank": [P, c_int, UniqueId, c_int],
    "ncclAllReduce": [P, P, c_size_t, c_int, c_int, P, P], "ncclReduce": [P, P, c_size_t, c_int, c_int, c_int, P, P],
    "ncclAllGather": [P, P, c_size_t, c_int, P, P], "ncclSend": [P, c_size_t, c_int, c_int, P, P],
    "ncclGroupStart": [], "ncclGroupEnd": [],
}


def load(path):
    lib = ctypes.CDLL(path)
    for name, args in SIGS.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            continue
        fn.argtypes, fn.restype = args, c_int
    return lib


def addr(fn) -> int:
    return ctypes.cast(fn, c_void_p).value


def wait_probed(fn, timeout=60):
    """A uprobe shows in the process as an int3 at the function's first byte."""
    end = time.time() + timeout
    while ctypes.string_at(addr(fn), 1) != b"\xcc":
        if time.time() > end:
            sys.exit(f"no uprobe appeared on {fn.__name__}")
        time.sleep(0.01)


def _wait_in_raw(raw, needle: bytes, what: str, timeout=60):
    """Until the recorder's raw log holds `needle` (its writer flushes as it drains)."""
    end = time.time() + timeout
    while True:
        with open(raw, "rb") as f:
            if needle in f.read():
                return
        if time.time() > end:
            sys.exit(what)
        time.sleep(0.02)


def wait_snapshot(raw, timeout=60):
    _wait_in_raw(raw, b'"type":"maps","pid":%d,' % os.getpid(), "the recorder wrote no mapping snapshot of this process",
                 timeout)


def wait_attached(raw, path, timeout=60):
    """The recorder notes a library in the raw log once all its probes are on;
    an int3 at one function only says its first probe is (the return probe
    may not be yet, and a call then is an entry without its return)."""
    _wait_in_raw(raw, b'"path":"%s"' % path.encode(), f"the recorder did not note probes on {path}", timeout)


def kernels(kdir):
    k, ks = ctypes.CDLL(os.path.join(kdir, "libkernels.so")), ctypes.CDLL(os.path.join(kdir, "libkernels_stripped.so"))
    k.scale_kernel_address.restype = ks.scale_kernel_address.restype = c_void_p
    return {"add": addr(k._Z9addKernelPfPKfS1_i), "scale": k.scale_kernel_address(),
            "stripped": ks.scale_kernel_address()}


def real(cudart, kdir, raw, copy_a, copy_b, standin_dir):
    rt, kn = load(cudart), kernels(kdir)
    out = {"pid": os.getpid(), "tid": threading.get_native_id(), **{k: hex(v) for k, v in kn.items()}}
    for i in range(3):
        rt.cudaLaunchKernel(kn["add"], dim3(70000, 2, 3), dim3(128, 1, 4), None, 4096, 0xABC0 + i)
    rt.cudaLaunchKernel_ptsz(kn["scale"], dim3(1, 1, 1), dim3(32, 1, 1), None, 0, None)
    rt.cudaLaunchKernel(kn["stripped"], dim3(5, 1, 1), dim3(64, 1, 1), None, 8, 0x1)
    cfg = LaunchConfig(dim3(131072, 3, 1), dim3(256, 2, 1), 2048, 0xDEF0, None, 0)
    rt.cudaLaunchKernelExC(byref(cfg), kn["add"], None)
    for kind in range(5):
        rt.cudaMemcpy(0x1000 + kind, 0x2000 + kind, 1000 + kind, kind)
    rt.cudaMemcpyAsync(0x3000, 0x4000, 1 << 20, 2, 0x5150)
    rt.cudaMemcpy2D(0x5000, 512, 0x6000, 256, 256, 100, 3)
    rt.cudaMemset(0x7000, 0x5A, 4096)
    ptr = c_void_p(0)
    rt.cudaMalloc(byref(ptr), 1 << 20)
    rt.cudaFree(0x1234)
    rt.cudaStreamSynchronize(0x77)
    rt.cudaDeviceSynchronize()
    rt.cudaSetDevice(1)
    rt.cudaEventRecord(0xE1, 0x77)
    rt.cudaStreamWaitEvent(0x77, 0xE1, 0)
    rt.cudaStreamQuery(0x78)
    rt.cudaGetDeviceCount(byref(c_int(0)))

    # Threads calling at the same time, each with its own grid.x.
    barrier, tids = threading.Barrier(3), {}

    def worker(i):
        tids[i] = threading.get_native_id()
        barrier.wait()
        for _ in range(40):
            rt.cudaLaunchKernel(kn["add"], dim3(1000 + i, 1, 1), dim3(i + 1, 1, 1), None, 0, None)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out["threads"] = tids

    # Copies of libcudart dlopen'ed after recording started, from two places.
    for j, path in enumerate((copy_a, copy_b)):
        lib = load(path)
        wait_probed(lib.cudaLaunchKernel)
        wait_attached(raw, path)
        lib.cudaLaunchKernel(kn["add"], dim3(11 * (j + 1), 1, 1), dim3(1, 1, 1), None, 0, None)

    env = dict(os.environ, RANK="3", WORLD_SIZE="8", LOCAL_RANK="1")
    child = subprocess.run([sys.executable, __file__, "standin", standin_dir, raw], env=env,
                           stdout=subprocess.PIPE, text=True, check=True)
    wait_snapshot(raw)
    print(json.dumps(out))
    print(child.stdout.strip())


def standin(d, raw):
    drv, rt, nccl = (load(os.path.join(d, n)) for n in ("libcuda.so.1", "libcudart.so.12", "libnccl.so.2"))
    for fn in (rt.cudaMalloc, drv.cuLaunchKernel, nccl.ncclAllReduce):
        wait_probed(fn)  # attached before launch (--cuda-lib): returns at once
    out = {"pid": os.getpid(), "tid": threading.get_native_id(), "ptrs": []}
    for size in (1 << 20, 3 << 20, 5 << 20):
        p = c_void_p(0)
        rt.cudaMalloc(byref(p), size)
        out["ptrs"].append(hex(p.value))
    rt.cudaFree(int(out["ptrs"][1], 16))
    for i in range(5):  # each calls cuLaunchKernel inside: not counted twice
        rt.cudaLaunchKernel(0x4242, dim3(2000 + i, 1, 1), dim3(64, 1, 1), None, 0, 0x10)
    for _ in range(10):
        rt.cudaMemcpyAsync(0x7E0000000000, 0x1000, 4096, 1, 0x10)
    rt.cudaDeviceSynchronize()
    g, e = c_void_p(0), c_void_p(0)
    rt.cudaStreamBeginCapture(0x5, 0)
    rt.cudaStreamEndCapture(0x5, byref(g))
    rt.cudaGraphInstantiate(byref(e), g, 0)
    for _ in range(3):
        rt.cudaGraphLaunch(e, 0x5)
    out["graph"], out["exec"] = hex(g.value), hex(e.value)

    f = c_void_p(0)
    drv.cuModuleGetFunction(byref(f), 0x3A, b"triton_poi_fused_add_0")
    out["function"] = hex(f.value)
    drv.cuLaunchKernel(f, 100000, 2, 1, 256, 1, 4, 1024, 0x99, None, None)
    cfg = CuLaunchConfig(3, 4, 5, 6, 7, 8, 512, 0x42, None, 0)
    drv.cuLaunchKernelEx(byref(cfg), f, None, None)
    dp = c_uint64(0)
    drv.cuMemAlloc_v2(byref(dp), 7 << 20)
    out["dptr"] = hex(dp.value)
    drv.cuMemFree_v2(dp)
    drv.cuCtxSynchronize()

    comm = c_void_p(0)
    nccl.ncclCommInitRank(byref(comm), 8, UniqueId(b"\x07"), 3)
    out["comm"] = hex(comm.value)
    nccl.ncclAllReduce(0x1111, 0x2222, 1000, 7, 0, comm, 0x55)           # float32, sum
    nccl.ncclReduce(0x1111, 0x2222, 500, 9, 2, 1, comm, 0x56)           # bfloat16, max, root 1
    nccl.ncclAllGather(0x1, 0x2, 250, 4, comm, 0x57)                     # int64
    nccl.ncclGroupStart()
    nccl.ncclSend(0x3, 64, 0, 4, comm, 0x58)                             # int8 to peer 4
    nccl.ncclGroupEnd()
    wait_snapshot(raw)
    print(json.dumps(out))


def entry(cudart, kdir, d, raw):
    rt, kn = load(cudart), kernels(kdir)
    srt, drv = load(os.path.join(d, "libcudart.so.12")), load(os.path.join(d, "libcuda.so.1"))
    for i in range(5):
        rt.cudaLaunchKernel(kn["add"], dim3(300 + i, 1, 1), dim3(32, 1, 1), None, 16, 0x20)
    for i in range(20):  # stand-in runtime -> driver: the driver launch is folded in
        srt.cudaLaunchKernel(0x4242, dim3(400 + i, 1, 1), dim3(64, 1, 1), None, 0, 0x21)
    for i in range(7):
        drv.cuLaunchKernel(0x77, 500 + i, 1, 1, 128, 1, 1, 0, 0x22, None, None)
    p = c_void_p(0)
    srt.cudaMalloc(byref(p), 4096)
    wait_snapshot(raw)
    print(json.dumps({"pid": os.getpid(), "tid": threading.get_native_id(), "ptr": hex(p.value)}))


def loop(cudart, kdir, stop):
    rt, kn = load(cudart), kernels(kdir)
    print(json.dumps({"pid": os.getpid(), "tid": threading.get_native_id()}), flush=True)
    while not os.path.exists(stop):
        rt.cudaLaunchKernel(kn["add"], dim3(777, 1, 1), dim3(7, 1, 1), None, 0, None)
        time.sleep(0.01)


if __name__ == "__main__":
    {"real": real, "standin": standin, "entry": entry, "loop": loop}[sys.argv[1]](*sys.argv[2:])
