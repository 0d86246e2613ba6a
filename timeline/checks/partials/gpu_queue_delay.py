"""gpu_queue_delay (sql/gpu_queue_delay.sql) as a partial computed at conversion.

Its inputs are _gpu.py's: per device, the steady state (tl_gpu_window), each steady kernel's delay
from the start of the CUDA call its flow comes from, and the GPU's busy time over the steady state
(tl_gpu_time: the union of all its work, clipped to the window). All of them are over the whole
recording (the median delay of a device, its busy share), so the partial is the set's part only:
per device n, p50, p99 of the delays (nearest rank, exact), the window's start, span and busy time.
Each chunk's part is empty. Bounded: 6 numbers per device.

No partial (the SQL runs) where _gpu.py has none, or for other parameters than the defaults (they
only change the verdict, but one rule for every partial keeps it simple).
"""
from __future__ import annotations

import numpy as np

from ..catalog import BY_ID
from ._gpu import GpuColumns, _fixed, _round, device_times, made_with, nearest_rank

CHECK = "gpu_queue_delay"
VERSION = 1
Collector = GpuColumns
HINT = ("the host cannot keep the GPU fed: fewer, larger kernels (fusion, torch.compile), CUDA graphs, less Python "
        "per step; check cpu_contention and input_stall")


def part(cols: GpuColumns, starts) -> dict | None:
    g = cols.steady()
    if g is None:
        return None
    devices = {}
    times = device_times(cols, g)
    for d, dev in enumerate(g["devices"].tolist()):
        t = times[str(dev)]
        q = (g["device_i"] == d) & g["kernel"] & g["steady"] & g["from_call"]
        delay = np.sort(g["ts"][q] - g["call_ts"][q])
        n = delay.size
        if n:
            devices[str(dev)] = [n, nearest_rank(delay, 0.50), nearest_rank(delay, 0.99), t.start, t.span, t.busy]
        else:
            devices[str(dev)] = [0, None, None, t.start, t.span, t.busy]
    return {"set": {"version": VERSION, "params": BY_ID[CHECK].defaults(), "devices": devices},
            "chunks": [{} for _ in range(len(starts))]}



def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part (None where the partial does not apply: run the SQL)."""
    if not made_with(set_part, VERSION, params):
        return None
    starve, idle_warn = params["starve_us"], params["idle_warn_fraction"]
    rows = []
    for dev, (n, p50, p99, ts, span, busy) in sorted(set_part["devices"].items(), key=lambda kv: int(kv[0])):
        if not n or span <= 0:
            continue
        starving = p50 < starve * 1000
        warn = starving and span - busy >= idle_warn * span
        text = (f"GPU {int(dev)}: kernels started {_fixed(p50 / 1e3, 1)} us (median; p99 {_fixed(p99 / 1e3, 1)} us) "
                f"after their launch call, over {n:,} kernels; the GPU was idle "
                f"{_fixed(100.0 * (span - busy) / span, 0)}% of the steady state")
        text += (": the launch queue is empty, the GPU starves on the host" if starving
                 else ": work is queued ahead of the GPU")
        rows.append({"severity": "warning" if warn else "ok", "finding": text, "ts": ts, "dur": span,
                     "hint": HINT if warn else None, "device": int(dev), "delay_p50_us": _round(p50 / 1e3, 3),
                     "delay_p99_us": _round(p99 / 1e3, 3), "kernels": n})
    if not any(v[0] for v in set_part["devices"].values()):
        rows.append({"severity": "n/a", "finding": "no GPU kernel is linked to the CPU call that launched it (no flows)",
                     "ts": None, "dur": None, "hint": None, "device": None, "delay_p50_us": None,
                     "delay_p99_us": None, "kernels": None})
    return rows
