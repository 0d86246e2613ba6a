"""What the CUDA injection library (family gpu) costs the traced program, on the stand-ins.

    python bench/gpu_inject_cost.py [--launches 400000] [--ranges 400000] [--rounds 5]

No GPU needed: the stand-in driver/runtime/libcupti of tests/standins (the
stand-in libcupti writes real-layout records, as CUPTI would).  Alternating
rounds, medians, for N cudaLaunchKernel calls made from a C loop:
  plain       no injection (CUDA_INJECTION64_PATH unset)
  cupti-only  injection on, but the stand-in CUPTI frees full buffers itself:
              CUPTI's side of the work alone (2 records per launch:
              the runtime API record and the kernel)
  full        injection on, buffers decoded and sent to a listening socket
  recorded    as full, but under `timeline record -e gpu` (needs root): the
              recorder's own receiver reads the socket and writes the raw log;
              also checks that every record arrived (none lost)
(full - cupti-only) / records is the batched channel's cost per record, to
compare with a USDT/uprobe trap per record (~1 us here, docs/benchmarks.md).
Also NVTX push/pop pairs with and without NVTX_INJECTION64_PATH.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, ".."))

from standins import build_gpu  # noqa: E402

CHILD = r"""
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1])
fn, n = getattr(lib, sys.argv[2]), int(sys.argv[3])
fn(1000)  # warm: cuInit, injection, first buffers
t = time.perf_counter(); fn(n); dt = time.perf_counter() - t
print(dt)
"""


def drain_server(name: str) -> None:
    """Accepts every connection and reads it to the end, like the recorder."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind("\0" + name)
    s.listen(16)

    def read(c):
        while c.recv(1 << 20):
            pass
        c.close()

    def accept():
        while True:
            c, _ = s.accept()
            threading.Thread(target=read, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def one(libs: dict, fn: str, n: int, env: dict) -> float:
    e = dict(os.environ)
    for k in ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "STANDIN_CUPTI_DISCARD"):
        e.pop(k, None)
    e.update(env)
    r = subprocess.run([sys.executable, "-c", CHILD, libs["liblaunch_loop.so"], fn, str(n)], env=e,
                       capture_output=True, text=True, check=True, timeout=300)
    return float(r.stdout.split()[-1])


def one_recorded(libs: dict, fn: str, n: int, raw: str) -> tuple[float, int]:
    """Launch loop under `timeline record -e gpu`: seconds, kernel records in the raw log."""
    import numpy as np

    from timeline import events
    from timeline.gpu import records
    from timeline.rawlog import KIND_RING, RawLogReader

    e = dict(os.environ)
    for k in ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "TIMELINE_GPU_SOCKET", "STANDIN_CUPTI_DISCARD"):
        e.pop(k, None)
    r = subprocess.run([sys.executable, "-m", "timeline.cli", "record", "--raw-only", "-q", "-e", "gpu", "-o", raw,
                        "--", sys.executable, "-c", CHILD, libs["liblaunch_loop.so"], fn, str(n)],
                       env=e, capture_output=True, text=True, check=True, timeout=300,
                       cwd=os.path.join(HERE, ".."))
    kernels = 0
    with RawLogReader(raw) as rd:
        for blk in rd.blocks():
            if blk.kind == KIND_RING and blk.ring == records.RING_GPU:
                recs = events.decode_ring_bytes(blk.payload, records.GPU_RECORD)
                kernels += int(np.count_nonzero(recs["kind"] == records.KERNEL))
    return float(r.stdout.split()[-1]), kernels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=400_000)
    ap.add_argument("--ranges", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tl-gpu-bench-")
    libs = build_gpu(tmp)
    inj = libs["libtimeline_inject.so"]
    sock = f"tl-gpu-bench-{os.getpid()}"
    drain_server(sock)
    rec = {"TIMELINE_GPU_SOCKET": sock, "CUDA_INJECTION64_PATH": inj}
    configs = {
        "plain": ("launch_loop", a.launches, {}),
        "cupti-only": ("launch_loop", a.launches, dict(rec, STANDIN_CUPTI_DISCARD="1")),
        "full": ("launch_loop", a.launches, rec),
        "nvtx off": ("nvtx_loop", a.ranges, {}),
        "nvtx on": ("nvtx_loop", a.ranges, {"TIMELINE_GPU_SOCKET": sock, "NVTX_INJECTION64_PATH": inj}),
    }
    times = {k: [] for k in configs}
    recorded = os.geteuid() == 0
    if recorded:
        times["recorded"], got = [], []
    for _ in range(a.rounds):
        for k, (fn, n, env) in configs.items():
            times[k].append(one(libs, fn, n, env))
        if recorded:
            dt, kernels = one_recorded(libs, "launch_loop", a.launches, os.path.join(tmp, "rec.tlraw"))
            times["recorded"].append(dt)
            got.append(kernels)
    med = {k: statistics.median(v) for k, v in times.items()}
    n, r = a.launches, a.ranges
    print(f"stand-in driver, {n} cudaLaunchKernel from C, median of {a.rounds} alternating rounds")
    for k in ("plain", "cupti-only", "full", *(("recorded",) if recorded else ())):
        print(f"  {k:11s} {n / med[k] / 1e6:7.2f} M launches/s  {med[k] / n * 1e9:7.1f} ns/launch  "
              f"ratio to plain {med['plain'] / med[k]:.3f}")
    if recorded:
        # the warm-up's 1000 launches are recorded too
        print(f"  recorded: kernel records in the raw log per run {sorted(set(got))} "
              f"(launched {n + 1000}: {'none lost' if set(got) == {n + 1000} else 'LOST SOME'})")
    else:
        print("  (not root: the `recorded` row, through timeline record, is skipped)")
    per_rec = (med["full"] - med["cupti-only"]) / (2 * n) * 1e9
    print(f"  batched channel (decode + socket), per record: {per_rec:.1f} ns "
          f"(USDT/uprobe trap per record here: ~1000 ns -> {1000 / max(per_rec, 1e-9):.0f}x)")
    print(f"NVTX push+pop, {r} ranges from C")
    for k in ("nvtx off", "nvtx on"):
        print(f"  {k:9s} {med[k] / r * 1e9:7.1f} ns/range")


if __name__ == "__main__":
    main()
