"""A family that paints slices, counters and flows across the chunk boundaries of a trace set
(tests/unit/test_trace_set.py, tests/system/test_trace_set_record.py): the reference scenario
(rawlog_factory.scenario) split every STEP ns."""
from __future__ import annotations

import numpy as np
import pytest

from timeline.converters import families
from timeline.converters.families import FamilyConverter
from timeline.converters.interface import Column
from timeline.converters.trace_set import set_start
from rawlog_factory import T

STEP = 200_000  # ns: chunks of 200 us over the scenario's ~1 ms
ACROSS = 0xF10 << 32  # the flow from a launch at the end of chunk 1 to its kernel in chunk 2


class Painter(FamilyConverter):
    """A family that draws, at the end, slices, counters and flows across chunk boundaries."""

    def finish(self, sink):
        rng = np.random.default_rng(7)
        for tid in (1000, 1001):  # non-overlapping slices, some crossing one or two boundaries
            edges = np.sort(rng.choice(np.arange(T(26), T(990), 997), 40, replace=False))
            ts, end = edges[0::2], edges[1::2]
            n = ts.size
            names = Column("name", "str", rng.integers(0, 3, n), ["fwd", "bwd", "step"])
            flow = np.zeros(n, np.uint64)
            flow[0] = 100 + tid  # to the first GPU slice below, same chunk
            sink.slices(ts, end - ts, np.full(n, tid), None, names, "paint",
                        [Column("n", "int", np.arange(n, dtype=np.int64))], flow_out=flow)
        sink.slice(T(25), T(700) - T(25), 1000, 1000, "long", "paint", {"k": 1})  # under all the others
        g_ts = np.array([T(20), T(180), T(395)], np.int64)
        sink.group_slices("GPU 0", "stream 7", g_ts, np.array([5_000, 60_000, 500_000]), "kernel", "gpu",
                          flow_in=np.array([101 + 1000 - 1, 101 + 1001 - 1, 0], np.uint64))
        sink.async_slice("memcpy", T(150), T(450) - T(150), "copy", "paint")
        sink.counters("queue", np.array([T(50), T(120), T(650)]), np.array([1, 2, 3]))
        sink.group_counters("GPU 0", "memory", np.array([T(30)]), np.array([4.5]))
        sink.instant(T(333), 1001, None, "mark", "paint")
        edge = set_start(self.model) + STEP  # chunk 2's start
        sink.slice(edge - 3_000, 1_000, 1002, 1000, "cudaLaunchKernel", "cuda", flow_out=ACROSS)
        sink.group_slices("GPU 0", "stream 9", np.array([edge + 5_000]), np.array([2_000]), "late kernel", "gpu",
                          flow_in=np.array([ACROSS], np.uint64))


@pytest.fixture
def painted(monkeypatch):
    real = families.load
    monkeypatch.setattr(families, "load", lambda m: real(m) + [Painter(m)])
