"""comm_overlap (sql/comm_overlap.sql) as a partial computed at conversion.

Its inputs are _gpu.py's: per device, over its steady state (tl_gpu_window), the time with a
communication (NCCL) kernel running, and how much of it had a compute kernel beside it
(tl_gpu_time's comm, overlap, comm_only), each a union of intervals clipped to the window
(_gpu.device_times, shared with gpu_breakdown and gpu_queue_delay). All of them are over the whole
recording, so the partial is the set's part only: per device the window's start and span and the
three times. Each chunk's part is empty. Bounded: 5 numbers per device.

No partial (the SQL runs) where _gpu.py has none, or for other parameters than the defaults.
"""
from __future__ import annotations

from ..catalog import BY_ID
from ._gpu import GpuColumns, _fixed, _round, device_times, made_with

CHECK = "comm_overlap"
VERSION = 1
Collector = GpuColumns
HINT = ("overlap gradients' all-reduce with the backward pass (DDP bucket_cap_mb, gradient_as_bucket_view; FSDP "
        "prefetch), or communicate less (larger batches per step, gradient accumulation)")


def part(cols: GpuColumns, starts) -> dict | None:
    g = cols.steady()
    if g is None:
        return None
    devices = {dev: [t.start, t.span, t.comm, t.comm - (t.compute_or_comm - t.compute),
                     t.compute_or_comm - t.compute] for dev, t in device_times(cols, g).items()}
    return {"set": {"version": VERSION, "params": BY_ID[CHECK].defaults(), "devices": devices},
            "chunks": [{} for _ in range(len(starts))]}


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part (None where the partial does not apply: run the SQL)."""
    if not made_with(set_part, VERSION, params):
        return None
    rows = []
    for dev, (ts, span, comm, overlap, comm_only) in sorted(set_part["devices"].items(), key=lambda kv: int(kv[0])):
        if comm <= 0 or span <= 0:
            continue
        warn = comm >= params["min_comm_fraction"] * span and overlap < params["overlap_warn_fraction"] * comm
        text = (f"GPU {int(dev)}: communication kernels ran {_fixed(comm / 1e9, 2)} s "
                f"({_fixed(100.0 * comm / span, 0)}% of the steady state), {_fixed(100.0 * overlap / comm, 0)}% of "
                f"it overlapped with compute; {_fixed(comm_only / 1e9, 2)} s exposed")
        rows.append({"severity": "warning" if warn else "ok", "finding": text, "ts": ts, "dur": span,
                     "hint": HINT if warn else None, "device": int(dev),
                     "overlap_fraction": _round(1.0 * overlap / comm, 4), "exposed_s": _round(comm_only / 1e9, 4)})
    if not any(v[2] > 0 for v in set_part["devices"].values()):
        rows.append({"severity": "n/a", "finding": "no communication (NCCL) kernels on any GPU", "ts": None,
                     "dur": None, "hint": None, "device": None, "overlap_fraction": None, "exposed_s": None})
    return rows
