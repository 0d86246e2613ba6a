"""kernel_outliers (sql/kernel_outliers.sql) as a partial computed at conversion.

Its inputs are _gpu.py's (GPU work, flows, launches; the devices' steady states).

The steady state of a device (tl_gpu_window) and each kernel's median depend on the whole recording,
so they are computed once, at the end of the conversion, over every chunk: the set part holds per
kernel name n, p50, p99 and max (nearest rank, exact). Each chunk's part holds, per kernel name, its
outliers under those medians: how many, the first start and last end, the Python lines they came
from, and the longest max_outliers of them. Bounded: kernel names x (max_outliers + lines).

No partial (the SQL runs) where _gpu.py has none, with more kernel names than MAX_NAMES or more
Python lines than MAX_LINES in a chunk's part, or for other parameters than the defaults.
"""
from __future__ import annotations

import numpy as np

from ..catalog import BY_ID
from ._gpu import (GpuColumns, _fixed, _g, _py_line, _round, add_summary, launched_from, made_with, nearest_rank,
                   outlier_summary)

CHECK = "kernel_outliers"
VERSION = 1
MAX_NAMES = 20_000      # kernel names with a median
MAX_LINES = 1_000       # Python lines per kernel name in a chunk's part
Collector = GpuColumns


def part(cols: GpuColumns, starts) -> dict | None:
    """The set's part and each chunk's (the module doc), or None: no partial."""
    g = cols.steady()
    if g is None:
        return None
    starts = np.asarray(starts, np.int64)
    sel = g["kernel"] & g["steady"]
    ts, dur, name, dev, py = (g[k][sel] for k in ("ts", "dur", "name", "device", "py"))
    strings = cols.s.strings
    p = BY_ID[CHECK].defaults()
    names = np.unique(name)
    if names.size > MAX_NAMES:
        return None
    stats, chunks = {}, [{} for _ in range(starts.size)]
    chunk = np.clip(np.searchsorted(starts, ts, "right") - 1, 0, starts.size - 1)
    keep = int(p["max_outliers"])
    order = np.lexsort((dur, name))  # by name, then duration: each name's runs in a row, sorted
    cuts = np.flatnonzero(np.diff(name[order])) + 1
    for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, order.size].tolist()):
        m = order[lo:hi]
        d = dur[m]
        n = d.size
        if n < p["min_runs"]:
            continue
        p50, p99 = nearest_rank(d, 0.50), nearest_rank(d, 0.99)
        label = strings[int(name[m[0]])]
        stats[label] = [n, p50, p99, int(d[-1])]
        out = m[(d >= p["outlier_factor"] * p50) & (d >= p["min_outlier_us"] * 1000)]
        for k in np.unique(chunk[out]).tolist():
            o = out[chunk[out] == k]
            summary = outlier_summary(o, ts, dur, py, strings, MAX_LINES)
            if summary is None:
                return None
            worst = o[np.argsort(-dur[o], kind="stable")[:keep]]
            chunks[k][label] = {**summary, "worst": [[int(ts[i]), int(dur[i]), int(dev[i]),
                                                      _py_line(strings[py[i]]) if py[i] >= 0 else None]
                                                     for i in worst.tolist()]}
    return {"set": {"version": VERSION, "params": p, "stats": stats}, "chunks": chunks}


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows from the set's part and each chunk's (None: a chunk without one; then,
    or when params differ from those the partial was made with, None: run the SQL)."""
    if not made_with(set_part, VERSION, params) or any(c is None for c in chunk_parts):
        return None
    stats = set_part["stats"]
    factor, keep = params["outlier_factor"], int(params["max_outliers"])
    per: dict = {}
    worst = []
    for part in chunk_parts:
        for label, o in part.items():
            add_summary(per, label, o)
            worst += [(label, *w) for w in o["worst"]]
    rows = []
    for label in sorted(per):
        n, p50, p99, mx = stats[label]
        a = per[label]
        text = (f"{label}: {a['outliers']:,} of {n:,} runs took over {_g(factor)}x its median "
                f"({_fixed(p50 / 1e3, 1)} us); p99 {_fixed(p99 / 1e3, 1)} us, worst {_fixed(mx / 1e6, 2)} ms")
        more, top_line, share = launched_from(a["lines"])
        text += more
        rows.append({"severity": "warning", "finding": text, "ts": a["first_ts"],
                     "dur": a["last_end"] - a["first_ts"], "hint": None, "kernel": label,
                     "outliers": a["outliers"], "runs": n, "p50_us": _round(p50 / 1e3, 3),
                     "max_us": _round(mx / 1e3, 3), "python_line": top_line, "python_share": share})
    for label, ts, dur, dev, line in sorted(worst, key=lambda w: -w[2])[:keep]:
        p50 = stats[label][1]
        rows.append({"severity": "info", "finding": f"{label} ran {_fixed(dur / 1e6, 2)} ms on GPU {dev} "
                     f"({_fixed(dur / p50, 0)}x its median)" + (f"; launched from {line}" if line else ""),
                     "ts": ts, "dur": dur, "hint": None, "kernel": label, "outliers": None, "runs": None,
                     "p50_us": None, "max_us": _round(dur / 1e3, 3), "python_line": line, "python_share": None})
    if stats and not per:
        total = sum(s[0] for s in stats.values())
        rows.append({"severity": "ok", "finding": f"{total:,} kernel runs of {len(stats):,} kernels seen at least "
                     f"{int(params['min_runs'])} times, none over {_g(factor)}x its median",
                     "ts": None, "dur": None, "hint": None, "kernel": None, "outliers": 0, "runs": total,
                     "p50_us": None, "max_us": None, "python_line": None, "python_share": None})
    if not stats and not per:
        rows.append({"severity": "n/a", "finding": "no kernel ran often enough in the steady state to have a median",
                     "ts": None, "dur": None, "hint": None, "kernel": None, "outliers": None, "runs": None,
                     "p50_us": None, "max_us": None, "python_line": None, "python_share": None})
    return rows
