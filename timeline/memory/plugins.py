"""Recorder plugin of the cgroup family: a sampler thread reading the
recorded processes' cgroups (cgroups.py).  Each sample is one ring record
(cgroup_records.h) per counter of each cgroup, cumulative as the kernel keeps
it; the cgroups' names and members go in META blocks when they change:

    {"type": "cgroup_names", "ts": BOOTTIME ns,
     "cgroups": {"index": label, ...},        # the ones new since the last block
     "members": {label: [pid, ...], ...}}     # every cgroup's recorded processes, now

label: the v2 path ("/job/a"), or "controllers:path" for a v1 hierarchy
("cpu:/job/a").  Counters: cgroup_records.COUNTERS.
"""
from __future__ import annotations

import threading

import numpy as np

from .. import events
from ..errors import UserError
from ..kctx.family import MIN_SAMPLE_INTERVAL, sample_interval_ok
from ..recorder_plugins import PeriodicSampler, RecorderPlugin
from .cgroup_records import CGROUP_SAMPLE, CGROUP_SAMPLE_EVENT, COUNTER_IDS, RING_CGROUP
from .cgroups import MAX_CGROUPS, CgroupReader


class CgroupPlugin(RecorderPlugin):
    family = "cgroup"

    def __init__(self, cfg, options):
        super().__init__(cfg, options)
        self.interval = float(options.cgroup_interval or 0)
        self.reader: CgroupReader | None = None
        self._members: dict | None = None
        self._index: dict[str, int] = {}   # label -> its `cgroup` index in the records
        self._lock = threading.Lock()
        self.sampler = PeriodicSampler("timeline-cgroups", self.interval, self.sample)

    def preflight(self) -> None:
        if not sample_interval_ok(self.interval):
            raise UserError(f"--cgroup-interval {self.interval:g}: give a finite number of seconds, at least "
                            f"{MIN_SAMPLE_INTERVAL:g} (0 turns the cgroup sampler off)")

    def header(self) -> dict:
        return {"cgroup_interval": self.interval}

    def on_target(self, ctx) -> None:
        if not self.interval:
            return
        self.reader = CgroupReader()
        if not self.reader.mounts:
            ctx.summary.append("cgroup: no cgroup filesystem mounted: no cgroup counters")
            return
        self.sampler.start(ctx)

    def sample(self, ctx) -> None:
        with self._lock:
            values, members = self.reader.sample(set(ctx.processes))
            ts = ctx.now_ns()
            new = {lab: len(self._index) + i for i, lab in enumerate(sorted(set(values) - set(self._index)))}
            if new or members != self._members:
                self._index.update(new)
                self._members = members
                ctx.write_meta({"type": "cgroup_names", "ts": ts,
                                "cgroups": {str(i): lab for lab, i in new.items()}, "members": members})
            rows = [(self._index[lab], COUNTER_IDS[k], v) for lab, vals in values.items()
                    for k, v in vals.items() if k in COUNTER_IDS]
            if rows:
                recs = np.zeros(len(rows), CGROUP_SAMPLE_EVENT)
                recs["ts"], recs["kind"] = ts, CGROUP_SAMPLE
                recs["cgroup"], recs["counter"], recs["value"] = zip(*rows)
                ctx.write_ring(RING_CGROUP, events.encode_ring_bytes(recs))

    def stop(self, ctx) -> None:
        if not self.sampler.started:
            if self.reader is not None:
                self.reader.close()
            return
        self.sampler.stop()
        self.sample(ctx)  # a last point, so the counters cover the end of the run
        r = self.reader
        if r.over_limit:
            ctx.summary.append(f"cgroup: {len(r.over_limit)} cgroups past the first {MAX_CGROUPS} not sampled")
        for what, why in sorted(r.unreadable.items())[:3]:
            ctx.summary.append(f"cgroup: cannot read {what}: {why}")
        r.close()
        if self.sampler.error:
            ctx.summary.append(f"warning: cgroup: sampling stopped early: {self.sampler.error}")
