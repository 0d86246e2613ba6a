"""Conversion speed of the gpu family's records (ring 7), next to the cuda family's call slices.

A synthetic raw log of a launch-bound loop: per launch, the cuda family's cudaLaunchKernel record,
CUPTI's API record and the kernel it ran (every 10th launch a copy instead: cudaMemcpyAsync and a
memcpy record), an NVTX range per 100 launches, 4 streams, 2 GPUs, records in blocks of 4096 as
the receiver stores them.  Converted to Perfetto and Chrome JSON; the time spent inside each
family's converter (its scan, emit and finish, including the sink's encoding, and for gpu the
matching of calls to work in call_links, read ahead of pass 2) is measured in the same run.

    python bench/gpu_convert_speed.py [--launches 500000]

Prints GPU records/s and CUDA call slices/s per format, and their ratio.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from rawlog_factory import BOOT0, LogBuilder, end_block  # noqa: E402

from timeline import events as ev  # noqa: E402
from timeline.converters import call_links, convert  # noqa: E402
from timeline.cuda import records as cuda_records  # noqa: E402
from timeline.cuda.converter import CudaConverter  # noqa: E402
from timeline.cuda.probes import BY_NAME, table_meta  # noqa: E402
from timeline.gpu import records as R  # noqa: E402
from timeline.gpu.converter import GpuConverter  # noqa: E402

PID = 1000
BLOCK = 4096


def build(path: str, n: int) -> tuple[int, int]:
    """The log; returns (gpu records, cuda call records)."""
    rng = np.random.default_rng(1)
    t = BOOT0 + 1_000_000 + np.arange(n, dtype=np.int64) * 10_000       # a launch every 10 us
    copy = (np.arange(n) % 10) == 9
    tid = np.where(np.arange(n) % 3 == 0, PID + 1, PID)
    calls = np.zeros(n, cuda_records.CUDA_EVENT)
    launch, memcpy = BY_NAME["cudaLaunchKernel"], BY_NAME["cudaMemcpyAsync"]
    calls["cookie"] = np.where(copy, memcpy.cookie(), launch.cookie())
    calls["ts"], calls["dur"], calls["tid"], calls["tgid"] = t, 4_000, tid, PID
    calls["kind"], calls["flags"] = cuda_records.CUDA_CALL, cuda_records.CF_HAS_RET
    calls["args"][:, 2] = np.where(copy, 1 << 20, 0)
    calls["args"][:, 3] = np.where(copy, 1, 0)
    corr = np.arange(1, n + 1, dtype=np.uint32)
    api = np.zeros(n, R.GPU_RECORD)
    api["kind"], api["start"], api["end"], api["pid"], api["tid"] = R.API, t + 500, t + 3_500, PID, tid
    api["correlation"], api["domain"] = corr, np.where(copy, 41, 211)
    work = np.zeros(n, R.GPU_RECORD)
    dur = rng.integers(2_000, 30_000, n)
    work["kind"] = np.where(copy, R.MEMCPY, R.KERNEL)
    work["start"], work["end"] = t + 5_000, t + 5_000 + dur
    work["pid"], work["correlation"], work["device"] = PID, corr, np.arange(n) % 2
    work["stream"] = 7 + (np.arange(n) // 2) % 4
    work["name"] = 1 + np.arange(n) % 50
    work["grid"], work["block"] = (128, 1, 1), (256, 1, 1)
    work["registers"], work["static_smem"] = 32, 1024
    work["bytes"], work["copy_kind"] = np.where(copy, 1 << 20, 0), np.where(copy, 1, 0)
    steps = np.arange(0, n, 100)
    nvtx = np.zeros(steps.size, R.GPU_RECORD)
    nvtx["kind"], nvtx["start"], nvtx["end"] = R.NVTX, t[steps], t[steps] + 999_000
    nvtx["pid"], nvtx["tid"], nvtx["name"] = PID, PID, 100
    gpu = np.concatenate([api, work, nvtx])
    gpu = gpu[np.argsort(gpu["start"], kind="stable")]

    b = LogBuilder(ncpu=2, target_pid=PID)
    b.header["cuda"] = {"probes": table_meta(), "mode": "full"}
    b.procs(BOOT0, [{"pid": PID, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
                     "threads": [{"tid": PID, "comm": "python3"}, {"tid": PID + 1, "comm": "pt_autograd_0"}]}])
    b.switch(BOOT0 + 1, 0, 5, PID, prev_tracked=False)
    b.switch(int(t[-1]) + 10**6, 0, PID, 5, prev_state=1, next_tracked=False)
    b.flush()
    strings = {str(i): f"_Z{len(f'kernel{i}')}kernel{i}Pfi" for i in range(1, 51)}
    strings["100"] = "train_step"
    b.blocks.append(("meta", {"type": "gpu_strings", "pid": PID, "strings": strings}))
    for i in range(0, n, BLOCK):
        b.blocks.append(("ring", (cuda_records.RING_CUDA, ev.encode_ring_bytes(calls[i:i + BLOCK]))))
        lo, hi = np.searchsorted(gpu["start"], [t[i], t[min(i + BLOCK, n) - 1] + 1])
        for j in range(lo, hi, BLOCK):
            b.blocks.append(("ring", (R.RING_GPU, ev.encode_ring_bytes(gpu[j:min(j + BLOCK, hi)]))))
    b.write(path, end=end_block(stop_ts=int(t[-1]) + 2 * 10**6))
    return gpu.size, calls.size


def timed(cls, attrs, acc, key, running=[]):
    """Time spent in cls's methods adds to acc[key]; a method timed inside another one's call (the
    link's read-ahead inside either family's) counts for its own key only."""
    for name in attrs:
        orig = getattr(cls, name)

        def wrap(*a, _orig=orig, **kw):
            t0 = time.perf_counter()
            running.append(key)
            try:
                return _orig(*a, **kw)
            finally:
                running.pop()
                dt = time.perf_counter() - t0
                acc[key] += dt
                if running:
                    acc[running[-1]] -= dt
        setattr(cls, name, wrap)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=500_000)
    args = ap.parse_args()
    acc = {"gpu": 0.0, "cuda": 0.0, "links": 0.0}
    methods = ("scan_ring", "scan_meta", "emit_ring", "emit_meta", "finish")
    timed(GpuConverter, methods, acc, "gpu")
    timed(CudaConverter, methods, acc, "cuda")
    timed(call_links.CallLinks, ("advance",), acc, "links")
    with tempfile.TemporaryDirectory() as d:
        raw = os.path.join(d, "gpu.tlraw")
        n_gpu, n_cuda = build(raw, args.launches)
        print(f"{n_gpu} GPU records (API, kernels, copies, NVTX), {n_cuda} CUDA call records")
        for fmt, out in (("perfetto", "t.pftrace"), ("chrome", "t.json")):
            for k in acc:
                acc[k] = 0.0
            t0 = time.perf_counter()
            convert(raw, os.path.join(d, out), fmt=fmt)
            total = time.perf_counter() - t0
            # call_links reads ahead (both families' records) and matches when either family asks:
            # counted as the gpu family's work
            gpu_s, cuda_s = acc["gpu"] + acc["links"], acc["cuda"]
            print(f"{fmt:9s} GPU records {n_gpu / gpu_s / 1e3:8.0f}k/s ({gpu_s:.2f} s)   CUDA call slices "
                  f"{n_cuda / cuda_s / 1e3:8.0f}k/s ({cuda_s:.2f} s)   ratio {n_gpu / gpu_s / (n_cuda / cuda_s):.2f}"
                  f"   whole conversion {total:.2f} s, {os.path.getsize(os.path.join(d, out)) / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
