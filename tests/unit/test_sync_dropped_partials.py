"""sync_hotspots and dropped_events from a trace set's index (timeline/checks/partials/): the set's
findings from its index equal the SQL's on the same log converted as one trace."""
from __future__ import annotations

import json

import pytest

from test_check_partials import StackedGpuLog, set_result, sql_findings
from test_gpu_convert import TID, WORKER, us
from timeline.checks.traceset import FROM_INDEX
from timeline.converters import convert
from timeline.converters.trace_set import SplitSpec


def both(tmp_path, g, check, split_ms=100):
    raw = g.write(tmp_path / "run.tlraw", block=200)
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    res = convert(raw, str(tmp_path / "set.pftrace"), split=SplitSpec(duration_ns=int(split_ms * 1e6)))
    with open(f"{res.out_path}/index.json") as f:
        index = json.load(f)
    return sql_findings(one, check), set_result(res.out_path, check), index


def sync_log(case: str) -> StackedGpuLog:
    """The main thread (TID) launches every 10 ms over 1 s. mixed: it waits in stream syncs (some
    across chunk boundaries, some with Python stacks) and tiny D2H copies, ~40% of its span; the worker
    in a big D2H copy and a device sync, ~15% of its span. main_below: the main thread waits under 1%
    (listed only as the main thread), the worker half its span. none: launches only."""
    g = StackedGpuLog()
    for i in range(100):
        g.call("cudaLaunchKernel", us(1000 + 10_000 * i), 5000, args=(0x1000,))
    if case == "mixed":
        for i in range(10):  # 10 ms stream syncs at 95 ms, 195 ms, ... (crossing each 100 ms chunk start)
            t = 95_000 + 100_000 * i
            g.call("cudaStreamSynchronize", us(t), 30_000_000 + 1000 * i)
            if i % 3 == 0:
                g.stacked[us(t)] = ("A" if i < 6 else "B", "cudaStreamSynchronize", TID)
        for i in range(30):  # .item(): 4-byte D2H copies (kind 2)
            g.call("cudaMemcpy", us(8000 + 30_000 * i), 2_000_000, args=(0x10, 0x20, 4, 2))
        g.call("cudaMemcpy", us(40_000), 500_000, args=(0x10, 0x20, 4096, 1))  # H2D: not a wait
        g.call("cudaMemcpy", us(300_000), 60_000_000, tid=WORKER, args=(0x10, 0x20, 1 << 20, 2))
        g.call("cudaDeviceSynchronize", us(450_000), 30_000_000, tid=WORKER)
        g.call("cudaLaunchKernel", us(900_000), 5000, tid=WORKER, args=(0x1000,))
    elif case == "main_below":
        g.call("cudaStreamSynchronize", us(500_000), 2_000_000)
        g.call("cuCtxSynchronize", us(250_000), 300_000_000, tid=WORKER)
        g.call("cudaLaunchKernel", us(100_000), 5000, tid=WORKER, args=(0x1000,))
        g.call("cudaLaunchKernel", us(700_000), 5000, tid=WORKER, args=(0x1000,))
    return g


@pytest.mark.parametrize("case", ["mixed", "main_below", "none"])
def test_sync_hotspots_partial_gives_the_sql_findings(tmp_path, case):
    (status, want), got, index = both(tmp_path, sync_log(case), "sync_hotspots")
    assert "sync_hotspots" in index.get("partials", {}) and len(index["chunks"]) >= 10
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    sev = [f.severity for f in want]
    if case == "mixed":
        assert sev == ["error", "warning"], want
        assert "called at " in want[0].message and "scalar reads like .item()" in want[0].message
        assert want[0].hint and want[1].evidence["scalar_reads"] == 0
    elif case == "main_below":
        assert sev == ["error", "ok"], want
        assert want[1].message.startswith("python3 (tid 1000)")
    else:
        assert status == "ok" and want[0].message.startswith("no synchronizing"), want
