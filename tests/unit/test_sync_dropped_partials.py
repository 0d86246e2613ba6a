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
from timeline.sched_records import RING_SCHED


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
        g.call("cuMemcpyDtoH_v2", us(600_000), 5_000_000, tid=WORKER, args=(0x10, 0x20, 8))  # the driver's: D2H
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
        assert want[0].hint and want[1].evidence["scalar_reads"] == 1
        assert "cuMemcpyDtoH_v2 D2H 0.005 s (1 calls, 1 of <= 64 B" in want[1].message
    elif case == "main_below":
        assert sev == ["error", "ok"], want
        assert want[1].message.startswith("python3 (tid 1000)")
    else:
        assert status == "ok" and want[0].message.startswith("no synchronizing"), want


def busy(builder):
    """The log's switches, and 1200 more on CPU 0 (the main thread off and on every 1.8 ms): drops of a
    few records are then under error_fraction of the switches."""
    def more():
        b = builder()
        b._sched = []
        b.blocks = [x for x in b.blocks if not (x[0] == "ring" and x[1][0] == RING_SCHED)]
        b.switch(us(0), 0, 5, TID, prev_tracked=False)
        for i in range(600):
            b.switch(us(1000 + 1800 * i), 0, TID, 5, prev_state=1, next_tracked=False)
            b.switch(us(1900 + 1800 * i), 0, 5, TID, prev_tracked=False)
        b.switch(us(1_200_000), 0, TID, 5, prev_state=1, next_tracked=False)
        b.switch(us(10), 1, 6, WORKER, prev_tracked=False)
        b.switch(us(1_200_000), 1, WORKER, 6, prev_state=1, next_tracked=False)
        b.flush()
        return b
    return more


def causes(full, refused):
    return {"full": list(full), "refused": list(refused), "retried": [0, 0], "refused_max_pending": 4096,
            "ring_bytes": 1 << 20}


def scalar(end: dict) -> dict:
    end["drops"]["proc"] = 700  # a total without CPUs (a log from before per-CPU drops): the counter only
    return end


@pytest.mark.parametrize("case", ["drops", "refused", "many", "scalar", "none"])
def test_dropped_events_partial_gives_the_sql_findings(tmp_path, monkeypatch, case):
    """Drops on both CPUs of two rings (warning), some refused with room left (overrun < dropped
    events: the larger counts), enough to be an error, and none: the set's index says what the SQL
    says of the one trace."""
    import test_gpu_convert
    from rawlog_factory import end_block
    drops = {"drops": ([5, 2], [0, 1]), "refused": ([5, 2], [0, 1]), "many": ([500, 200], [0, 100]), "scalar": ([5, 2], [0, 1]),
             "none": ([0, 0], [0, 0])}[case]
    kw = {"drop_causes": {"sched": causes([1, 2], [4, 0]), "proc": causes([0, 0], [0, 1])}} if case == "refused" else {}
    monkeypatch.setattr(test_gpu_convert, "end_block",
                        lambda **a: (scalar if case == "scalar" else dict)(
                            end_block(drops_sched=drops[0], drops_proc=drops[1], **kw, **a)))
    g = sync_log("mixed")
    g.builder = busy(g.builder)
    (status, want), got, index = both(tmp_path, g, "dropped_events")
    assert "dropped_events" in index.get("partials", {}) and len(index["chunks"]) >= 10
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    assert status == {"drops": "warning", "refused": "warning", "many": "error", "scalar": "error",
                      "none": "ok"}[case], want
    if case == "scalar":
        assert want[0].evidence["dropped"] == 707 and want[0].evidence["dropped_per_cpu"] == "0:5 1:2", want
    elif case != "none":
        assert want[0].ts is not None and "by family: proc 1, sched 7" in want[0].message or case == "many"
        assert want[0].evidence["dropped_per_cpu"] == ("0:500 1:300" if case == "many" else "0:5 1:3")


@pytest.mark.parametrize("case", ["label_tie", "severity_tie"])
def test_sync_hotspots_declines_where_the_sql_order_decides(tmp_path, case):
    """Two labels of a thread with one total (group_concat's order), two listed threads of one
    severity (trace_processor's utid order): no findings from the index, the SQL runs."""
    g = sync_log("main_below")
    if case == "label_tie":
        g.call("cudaDeviceSynchronize", us(650_000), 300_000_000, tid=WORKER)
    else:
        g.call("cudaStreamSynchronize", us(600_000), 300_000_000, tid=TID)
    _, got, index = both(tmp_path, g, "sync_hotspots")
    assert "sync_hotspots" in index.get("partials", {}) and got.note != FROM_INDEX
