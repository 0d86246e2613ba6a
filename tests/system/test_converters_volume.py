"""Converters at volume: 200k and 1M context switches through both writers (seconds each).
The rest: tests/unit/test_converters.py.
"""
from __future__ import annotations

import time

from rawlog_factory import BOOT0, many_switches

from timeline.converters import convert

from test_converters import q


def test_bulk_and_throughput(tmp_path, open_trace):
    """Multi-block, multi-CPU volume: every switch arrives; prints events/s."""
    n = 200_000
    raw = many_switches(tmp_path / "big.tlraw", n, ncpu=4, block=30000)
    for name in ("big.pftrace", "big.json"):
        t0 = time.perf_counter()
        res = convert(raw, str(tmp_path / name))
        dt = time.perf_counter() - t0
        print(f"\n{name}: {res.events / dt / 1e6:.2f} M events/s, {res.out_bytes / n:.1f} bytes/switch")
        assert res.events == n and res.synthetic_switches == (4 if name.endswith("pftrace") else 0)
        with open_trace(tmp_path / name) as tp:
            assert q(tp, "select count(*) from sched") == [(n,)]
            assert q(tp, "select count(*) from sched where dur < 0") == [(4,)]
            assert q(tp, "select count(distinct utid) from sched") == [(16 + 1,)]  # + idle
            assert q(tp, "select min(ts) > %d from sched" % BOOT0) == [(1,)]


def test_throughput_1m(tmp_path):
    """Sanity print only, no assertion on speed."""
    raw = many_switches(tmp_path / "m.tlraw", 1_000_000)
    for name in ("m.pftrace", "m.json"):
        t0 = time.perf_counter()
        res = convert(raw, str(tmp_path / name))
        dt = time.perf_counter() - t0
        print(f"\n{name}: {res.events / dt / 1e6:.2f} M events/s, {res.out_bytes / res.events:.2f} bytes/event")
