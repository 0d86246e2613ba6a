"""block_io from a trace set's index (timeline/checks/partials/block_io.py): the block requests of the
one recording, aggregated at conversion, through the check's own reduce SQL, give what its SQL gives
on the log converted as one trace (requests cut at chunk boundaries, each device's exact-or-bucket
sketch decided on the whole recording, D sleep of threads across chunks)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from rawlog_factory import LogBuilder, end_block
from test_check_partials import set_result, sql_findings
from test_gpu_convert import PID, TID, WORKER, us
from timeline import events as ev
from timeline.checks.traceset import FROM_INDEX
from timeline.converters import convert
from timeline.converters.trace_set import SplitSpec
from timeline.kctx import block_records as B

CHECK = "block_io"
S, D = 1, 2  # prev_state bits
SPAN_US = 1_200_000


def dev_t(major: int, minor: int) -> int:
    return major << 20 | minor


class BlockLog:
    """Two threads of one process, switched in and out (D sleeps: `sleeps`, {tid: [(from_us, to_us)]}),
    and block requests: (start us, latency us, tid, dev_t, disk, bytes, op)."""

    def __init__(self, sleeps=None):
        self.reqs: list[tuple] = []
        self.sleeps = sleeps or {}

    def req(self, start_us, lat_us, tid=WORKER, dev=dev_t(8, 0), disk="sda", nbytes=4096, op=0):
        self.reqs.append((start_us, lat_us, tid, dev, disk, nbytes, op))

    def write(self, path) -> str:
        b = LogBuilder(ncpu=2, target_pid=PID)
        b.header["rings"][str(B.RING_BLOCK)] = {"name": "block", "record_size": B.BLOCK_EVENT.itemsize,
                                                "stride": ev.ring_stride(B.BLOCK_EVENT)}
        b.procs(us(0), [{"pid": PID, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
                         "threads": [{"tid": TID, "comm": "python3"}, {"tid": WORKER, "comm": "worker"}]}])
        for cpu, tid in ((0, TID), (1, WORKER)):
            idle = 5 + cpu
            b.switch(us(cpu * 10), cpu, idle, tid, prev_tracked=False)
            for lo, hi in self.sleeps.get(tid, []):
                b.switch(us(lo), cpu, tid, idle, prev_state=D, next_tracked=False)
                b.switch(us(hi), cpu, idle, tid, prev_tracked=False)
            b.switch(us(SPAN_US), cpu, tid, idle, prev_state=S, next_tracked=False)
        b.flush()
        r = np.zeros(len(self.reqs), B.BLOCK_EVENT)
        for i, (start, lat, tid, dev, disk, nbytes, op) in enumerate(sorted(self.reqs)):
            r[i]["ts"], r[i]["issue_ts"], r[i]["done_ts"] = us(start), us(start + lat / 10), us(start + lat)
            r[i]["tid"], r[i]["tgid"], r[i]["dev"], r[i]["bytes"] = tid, PID, dev, nbytes
            r[i]["kind"], r[i]["op"], r[i]["disk"], r[i]["sector"] = B.BLOCK_IO, op, disk.encode(), 8 * i
        for i in range(0, r.size, 500):
            b.blocks.append(("ring", (B.RING_BLOCK, ev.encode_ring_bytes(r[i:i + 500]))))
        return b.write(path, end=end_block(stop_ts=us(SPAN_US + 100)))


def scenario(case: str) -> BlockLog:
    """slow: sda with 2% of its requests over 50 ms (a warning), some of them across chunk boundaries,
    issued by both threads; nvme fast; both threads in D for a while. error: a request of 600 ms too.
    many: 5000 requests on nvme up to 90 ms (past the exact sketch: buckets), D of both threads. none: all fast, no
    D sleep of 1 ms."""
    rng = np.random.default_rng(7)
    g = BlockLog(sleeps={"slow": {WORKER: [(200_000, 450_000)], TID: [(700_000, 702_500)]},
                         "error": {WORKER: [(100_000, 300_000)]},
                         "many": {WORKER: [(200_000, 210_000)], TID: [(300_000, 310_000), (900_000, 950_000)]},
                         "none": {WORKER: [(200_000, 200_500)]}}[case])
    for i in range(300):
        g.req(1000 + i * 3900, float(rng.integers(100, 3000)), tid=WORKER if i % 3 else TID)
    for i in range(40):
        g.req(5000 + i * 29_000, float(rng.integers(20, 400)), dev=dev_t(259, 0), disk="nvme0n1", op=1,
              nbytes=131072)
    if case in ("slow", "error"):
        for k, start in enumerate((95_000, 290_000, 398_000, 505_000, 790_000, 1_000_000)):
            g.req(start, 50_000 + 7_000 * k, tid=TID if k % 2 else WORKER, nbytes=1 << 20)
    if case == "error":
        for k in range(5):
            g.req(150_000 + k * 100_000, 600_000, tid=WORKER)
    if case == "many":
        for i in range(5000):
            g.req(2000 + i * 230, float(rng.integers(5, 90_000)), tid=TID, dev=dev_t(259, 0), disk="nvme0n1")
    return g


def both(tmp_path, g: BlockLog, split_ms=100):
    raw = g.write(tmp_path / "run.tlraw")
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    res = convert(raw, str(tmp_path / "set.pftrace"), split=SplitSpec(duration_ns=int(split_ms * 1e6)))
    with open(f"{res.out_path}/index.json") as f:
        index = json.load(f)
    return sql_findings(one, CHECK), set_result(res.out_path, CHECK), index, res.out_path


@pytest.mark.parametrize("case", ["slow", "error", "many", "none"])
def test_partial_gives_the_sql_findings(tmp_path, case):
    (status, want), got, index, _ = both(tmp_path, scenario(case))
    assert CHECK in index.get("partials", {}) and len(index["chunks"]) >= 10
    assert got.note == FROM_INDEX
    assert (got.status, got.findings) == (status, want)
    text = [f.message for f in want]
    expected = {"slow": "warning", "error": "error", "many": "warning", "none": "ok"}[case]
    assert status == expected, text
    if case in ("slow", "error"):
        assert any("requests over 50 ms were issued by " in t and "worker (tid 1001, " in t for t in text), text
    if case != "none":
        assert any(t.startswith("threads in uninterruptible sleep (D): ") for t in text), text
    else:
        assert not any("uninterruptible" in t for t in text), text
    if case == "many":
        assert any("device 259:0: 5,040 requests" in t for t in text), text
        lat = {(r[1], r[2] is None) for r in index["partials"][CHECK]["rows"] if r[0] == "lat"}
        assert lat == {("259:0", True), ("8:0", False)}  # nvme past the exact sketch: buckets


def test_other_parameters_run_the_sql(tmp_path):
    """The partial is made with the default thresholds: others go through trace_processor per chunk."""
    from test_check_partials import TraceProcessorConfig, check_set, invoking_user

    _, got, _, path = both(tmp_path, scenario("slow"), split_ms=300)
    assert got.note == FROM_INDEX
    other = check_set(path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=[CHECK], workers=1,
                      params={CHECK: {"p99_warn_ms": 20}}).results[0]
    assert other.note != FROM_INDEX and other.status == "warning"


def test_no_partial_for_an_unnamed_slow_issuer(tmp_path):
    """A slow request issued by a thread the converter does not know: the SQL names it from the
    trace's thread table, which the partial does not model: it declines and the SQL decides."""
    g = scenario("none")
    g.req(500_000, 80_000, tid=4242)
    (status, want), got, index, _ = both(tmp_path, g, split_ms=300)
    assert CHECK not in index.get("partials", {})
    assert got.note != FROM_INDEX and (got.status, got.findings) == (status, want)


def test_no_partial_where_the_sched_columns_decline(tmp_path, monkeypatch):
    """Over _sched.py's row cap it holds no switch: the D sleep is then unknown, not none."""
    from timeline.checks.partials import _sched

    monkeypatch.setattr(_sched, "MAX_ROWS", 3)
    (status, want), got, index, _ = both(tmp_path, scenario("slow"), split_ms=300)
    assert CHECK not in index.get("partials", {})
    assert got.note != FROM_INDEX
    # Per chunk the SQL loses a D sleep across a boundary (open at one chunk's end: dur -1, dropped; the
    # next chunk has no row for it): the worker's 250 ms are missing there, which the partial keeps
    d_line = [f.message for f in want if "uninterruptible" in f.message]
    assert "worker (tid 1001) 0.25 s" in d_line[0] and not any("worker (tid 1001) 0.25 s" in f.message
                                                                for f in got.findings)
