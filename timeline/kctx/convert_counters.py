"""Sampled counters and exit totals -> counter tracks and per-thread instants.

Per process (pid-scoped counter tracks): 'rss_bytes', 'cpu_pct' (100 = one
CPU busy), 'minor_faults_per_s', 'major_faults_per_s', and with NVML
'gpu.memory_used_bytes'.  Per GPU N (global tracks): 'gpuN.utilization_pct',
'gpuN.memory_used_bytes', 'gpuN.sm_clock_mhz', 'gpuN.power_w',
'gpuN.pcie_tx_bytes_per_s', 'gpuN.pcie_rx_bytes_per_s'.
Exit totals: an instant 'thread totals' (category 'counters') on each exiting
thread's track, args utime_ns, stime_ns, minor_faults, major_faults,
voluntary_switches, involuntary_switches, read_bytes, write_bytes.
"""
from __future__ import annotations

from . import counters_records
from ..converters.families import FamilyConverter

GPU_FIELDS = ("utilization_pct", "memory_used_bytes", "sm_clock_mhz", "power_w",
              "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s")
TOTALS = (("utime_ns", "utime_ns"), ("stime_ns", "stime_ns"), ("min_flt", "minor_faults"),
          ("maj_flt", "major_faults"), ("nvcsw", "voluntary_switches"), ("nivcsw", "involuntary_switches"),
          ("read_bytes", "read_bytes"), ("write_bytes", "write_bytes"))


class CountersConverter(FamilyConverter):
    rings = (counters_records.RING_COUNTERS,)
    metas = ("kctx_samples",)

    def __init__(self, model):
        super().__init__(model)
        self.exit_totals: dict[int, dict] = {}   # tid -> totals (used by the DataLoader marks too)
        self._prev: dict[int, tuple] = {}        # pid -> (ts, cpu_ns, minflt, majflt)
        self._gpu_pids: set[int] = set()          # pids with GPU memory in the last sample

    def scan_ring(self, ring, recs) -> None:
        for r in recs:
            self.exit_totals[int(r["tid"])] = {out: int(r[f]) for f, out in TOTALS}

    def emit_ring(self, sink, ring, recs) -> None:
        for r in recs:
            totals = {out: int(r[f]) for f, out in TOTALS}
            sink.instant(int(r["ts"]), int(r["tid"]), int(r["tgid"]), "thread totals", "counters", totals)

    def emit_meta(self, sink, meta: dict) -> None:
        ts = int(meta["ts"])
        for pid, rss, cpu_ns, minflt, majflt in meta.get("proc") or ():
            if pid not in self.model.processes:
                continue
            sink.counter("rss_bytes", ts, int(rss), pid=pid)
            prev = self._prev.get(pid)
            self._prev[pid] = (ts, cpu_ns, minflt, majflt)
            if prev is None or ts <= prev[0]:
                continue
            dt = (ts - prev[0]) / 1e9
            sink.counter("cpu_pct", ts, max(0.0, (cpu_ns - prev[1]) / 1e9 / dt * 100), pid=pid)
            sink.counter("minor_faults_per_s", ts, max(0.0, (minflt - prev[2]) / dt), pid=pid)
            sink.counter("major_faults_per_s", ts, max(0.0, (majflt - prev[3]) / dt), pid=pid)
        for row in meta.get("gpu") or ():
            i, util, mem, sm, power_mw, tx, rx = row
            values = (util, mem, sm, power_mw / 1000 if power_mw is not None else None, tx, rx)
            for name, v in zip(GPU_FIELDS, values):
                if v is not None:
                    sink.counter(f"gpu{i}.{name}", ts, v)
        per_pid: dict[int, int] = {}
        for _, pid, used in meta.get("gpu_proc") or ():
            per_pid[pid] = per_pid.get(pid, 0) + int(used)
        if "gpu" in meta:  # NVML sampled: a process that freed all its GPU memory drops to 0
            for pid in self._gpu_pids - per_pid.keys():
                per_pid[pid] = 0
            self._gpu_pids = {pid for pid, used in per_pid.items() if used}
        for pid, used in per_pid.items():
            if pid in self.model.processes:
                sink.counter("gpu.memory_used_bytes", ts, used, pid=pid)
