"""cgroup samples -> counter tracks per cgroup (global tracks 'cgroup LABEL COUNTER').

LABEL is the v2 path ('/job/a') or 'controllers:path' for a v1 hierarchy
('cpu:/job/a', 'memory:/job/a').  Counters, each only where it moved during
the recording (a cgroup without a CPU limit has no throttling tracks):

- cpu.throttled_pct: the share of CFS periods in which the cgroup was
  throttled (its cpu.max / cpu.cfs_quota_us used up), per sample interval;
- cpu.nr_periods, cpu.nr_throttled, cpu.throttled_ms: totals since the
  recording began (throttled_ms sums the time each CPU's queue of the cgroup
  was held back, so it can pass the wall time with several CPUs);
- memory.events.high / .max / .oom / .oom_kill / ... (v2), memory.failcnt,
  memory.oom_kill (v1): times since the recording began that the cgroup hit
  memory.high (reclaim and throttling), its limit, or the OOM killer;
  memory.under_oom (v1): 1 while the cgroup is in OOM;
- cpu/memory/io.pressure.some_pct and .full_pct (PSI): the share of wall time,
  per interval, in which some (or all) of the cgroup's tasks stalled on that
  resource.
"""
from __future__ import annotations

import numpy as np

from ..converters.families import FamilyConverter
from .cgroup_records import COUNTERS, RING_CGROUP

SINCE_START = ("cpu.nr_periods", "cpu.nr_throttled", "memory.failcnt", "memory.oom_kill")


class CgroupConverter(FamilyConverter):
    rings = (RING_CGROUP,)
    metas = ("cgroup_names",)

    def __init__(self, model):
        super().__init__(model)
        self.names: dict[int, str] = {}          # cgroup index -> label
        self.parts: list[np.ndarray] = []

    def scan_meta(self, meta: dict) -> None:
        for i, lab in (meta.get("cgroups") or {}).items():
            if isinstance(lab, str) and str(i).isdigit():
                self.names[int(i)] = lab

    def scan_ring(self, ring, recs) -> None:
        self.parts.append(recs[["ts", "value", "cgroup", "counter"]].copy())

    def finish(self, sink) -> None:
        if not self.parts:
            return
        a = np.concatenate(self.parts)
        a = a[np.argsort(a["ts"], kind="stable")]
        for cg in np.unique(a["cgroup"]).tolist():
            lab = self.names.get(cg, f"cgroup#{cg}")
            r = a[a["cgroup"] == cg]
            rows: dict[int, dict] = {}
            for ts, value, counter in zip(r["ts"].tolist(), r["value"].tolist(), r["counter"].tolist()):
                if 0 < counter < len(COUNTERS):
                    rows.setdefault(ts, {})[COUNTERS[counter]] = value
            for name, points in series(sorted(rows.items())).items():
                _step_counter(sink, f"cgroup {lab} {name}", points)


def series(rows: list[tuple[int, dict]]) -> dict[str, list[tuple[int, float]]]:
    """The counter tracks of one cgroup's samples (rows sorted by ts): name -> [(ts, value)]."""
    out: dict[str, list[tuple[int, float]]] = {}
    keys = sorted({k for _, v in rows for k in v})
    for key in keys:
        pts = [(ts, v[key]) for ts, v in rows if key in v]
        if not pts:
            continue
        base = pts[0][1]
        if key in SINCE_START or key.startswith("memory.events."):
            out[key] = [(ts, x - base) for ts, x in pts]
        elif key == "cpu.throttled_usec":
            out["cpu.throttled_ms"] = [(ts, (x - base) / 1000) for ts, x in pts]
        elif key == "memory.under_oom":
            out[key] = pts
        elif key.endswith("_usec") and ".pressure." in key:
            out[key[:-len("_usec")] + "_pct"] = _rate(pts)
    per = [(ts, v.get("cpu.nr_periods"), v.get("cpu.nr_throttled")) for ts, v in rows]
    per = [p for p in per if p[1] is not None and p[2] is not None]
    if len(per) > 1:
        pct = [(per[0][0], 0.0)]
        for (_, p0, t0), (ts, p1, t1) in zip(per, per[1:]):
            pct.append((ts, 100.0 * (t1 - t0) / (p1 - p0) if p1 > p0 else 0.0))
        out["cpu.throttled_pct"] = pct
    # only what moved: a flat zero is no information, and tracks cost screen room
    return {k: p for k, p in out.items() if any(v != p[0][1] for _, v in p) or p[0][1]}


def _rate(pts: list[tuple[int, int]]) -> list[tuple[int, float]]:
    """Cumulative microseconds -> percent of wall time per interval."""
    out = [(pts[0][0], 0.0)]
    for (t0, a), (t1, b) in zip(pts, pts[1:]):
        if t1 > t0:
            out.append((t1, max(0.0, 100.0 * (b - a) * 1000 / (t1 - t0))))
    return out


def _step_counter(sink, name: str, points: list[tuple[int, float]]) -> None:
    last = None
    for ts, v in points:
        if v != last:  # a step function: write the changes only
            sink.counter(name, ts, v)
            last = v
