"""gpu_breakdown (sql/gpu_breakdown.sql) as a partial computed at conversion.

Its inputs are _gpu.py's: per device, the steady state (tl_gpu_window) and its GPU work, each row a
compute kernel, a communication kernel (NCCL's, named as the prelude's _tl_gpu.comm says) or a copy /
memset. The prelude's tl_gpu_time sums its elementary segments (_tl_gpu_seg) over the steady state:
here the same times are unions of intervals (timeline.gpu.intervals.merge) clipped to the window,
exact in ns: compute = |compute kernels|, comm_only = |compute or comm| - compute, copy_only =
busy - |compute or comm|, busy = |all work|. All of them are over the whole recording, so the partial
is the set's part only: per device the window's start and span and those four times (6 integers),
and the recording's start (the finding's "from +x s", from trace_start(): the set's start, the log's
first record; where the set starts later, at its first activity, there is no partial). Each chunk's
part is empty.

The per-step row (the main thread's NVTX step ranges) is not modelled: it hangs on the prelude's
main thread (tl_main_thread: the recorder's marker, else the thread with the most launches, else
scheduling data) and on trace_processor's nesting of NVTX ranges. So there is no partial (the SQL
runs) as soon as the recording holds an NVTX range name on 3 or more thread slices, the least the
SQL needs for a step name (_tl_gb_stepname: count(*) >= 3); below that the SQL has no step row either.

No partial (the SQL runs) where _gpu.py has none, or for other parameters than the defaults.
"""
from __future__ import annotations

import numpy as np

from ..catalog import BY_ID
from ...gpu import intervals
from ._gpu import GpuColumns, _fixed, _round, made_with

CHECK = "gpu_breakdown"
VERSION = 1
STEP_MIN = 3  # _tl_gb_stepname's "having count(*) >= 3"
Collector = GpuColumns
HINT = "the GPU waits for work: host_gpu_gaps and gpu_queue_delay say whether the host is too slow to feed it"


def _comm(name: str) -> bool:
    """The prelude's _tl_gpu.comm for a kernel name (GLOB: case-sensitive)."""
    return name.startswith("nccl") or "ncclKernel" in name or "ncclDevKernel" in name


def part(cols: GpuColumns, starts) -> dict | None:
    if any(n >= STEP_MIN for n in cols.nvtx.values()):
        return None  # maybe a per-step row: the SQL decides (the module doc)
    g = cols.steady()
    if g is None or not len(starts) or cols.log_start != int(starts[0]):
        return None  # the set starts after the log's first record (a ring dump's earlier process records)
    strings = cols.s.strings
    names = np.unique(g["name"])
    comm_names = [c for c in names.tolist() if c >= 0 and _comm(strings[c])]
    comm = g["kernel"] & np.isin(g["name"], comm_names)
    compute = g["kernel"] & ~comm
    s, e = g["ts"], g["ts"] + g["dur"]
    devices = {}
    for d, dev in enumerate(g["devices"].tolist()):
        on = g["device_i"] == d
        lo, hi = int(g["window"][d]), int(e[on].max())
        k, kc, busy = (_covered(s[m], e[m], lo, hi) for m in (on & compute, on & (compute | comm), on))
        devices[str(dev)] = [lo, hi - lo, k, kc - k, busy - kc, busy]
    return {"set": {"version": VERSION, "params": BY_ID[CHECK].defaults(), "start": int(starts[0]),
                    "devices": devices},
            "chunks": [{} for _ in range(len(starts))]}


def _covered(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> int:
    """ns of [lo, hi) covered by the union of the intervals [s, e)."""
    us, ue = intervals.merge(np.clip(s, lo, hi), np.clip(e, lo, hi))
    return int((ue - us).sum())


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part (None where the partial does not apply: run the SQL)."""
    if not made_with(set_part, VERSION, params):
        return None
    warn_at, t0 = params["idle_warn_fraction"], int(set_part["start"])
    rows = []
    for dev, (ts, span, compute, comm_only, copy_only, busy) in sorted(set_part["devices"].items(),
                                                                       key=lambda kv: int(kv[0])):
        if span <= 0:
            continue
        warn = span - busy >= warn_at * span
        pct = [_fixed(100.0 * x / span, 0) for x in (compute, comm_only, copy_only, span - busy)]
        text = (f"GPU {int(dev)}: compute {pct[0]}%, communication not overlapped {pct[1]}%, copies/memsets alone "
                f"{pct[2]}%, idle {pct[3]}% of {_fixed(span / 1e9, 2)} s (steady state, from "
                f"+{_fixed((ts - t0) / 1e9, 2)} s)")
        rows.append({"severity": "warning" if warn else "ok", "finding": text, "ts": ts, "dur": span,
                     "hint": HINT if warn else None, "device": int(dev),
                     "compute_fraction": _round(1.0 * compute / span, 4),
                     "comm_fraction": _round(1.0 * comm_only / span, 4),
                     "copy_fraction": _round(1.0 * copy_only / span, 4),
                     "idle_fraction": _round(1.0 * (span - busy) / span, 4)})
    return rows
