"""memory_pressure from a trace set's index (timeline/checks/partials/memory_pressure.py): the memory
family's stalls and OOM kills of the one recording, aggregated at conversion, through the check's own
reduce SQL, give what its SQL gives on the log converted as one trace (stalls cut at chunk
boundaries, a thread's stalls spread over chunks)."""
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
from timeline.memory import mem_records as M

CHECK = "memory_pressure"
OTHER = 2000  # a second process of the job (a DataLoader worker): its one thread is its main thread
SPAN_US = 1_200_000


class MemLog:
    """Two processes of the job (python3 with a second thread, and pt_data_worker); mem records."""

    def __init__(self):
        self.recs: list[np.ndarray] = []

    def stall(self, kind, start_us, dur_us, tid, tgid=PID, majflt=0, order=0):
        r = np.zeros(1, M.MEM_EVENT)
        r["ts"], r["end_ts"], r["tid"], r["tgid"], r["kind"] = us(start_us), us(start_us + dur_us), tid, tgid, kind
        r["maj_flt"], r["order"], r["nr"] = majflt, order, 32
        self.recs.append(r)

    def oom(self, at_us, tid, tgid, comm, tracked=True, killer=None):
        r = np.zeros(1, M.MEM_EVENT)
        r["ts"], r["tid"], r["tgid"], r["kind"], r["comm"] = us(at_us), tid, tgid, M.MEM_OOM_KILL, comm.encode()
        r["nr"], r["flags"] = 25_600, (M.MF_VICTIM_TRACKED if tracked else 0)
        if killer is not None:
            r["flags"] |= M.MF_KILLER_TRACKED
            r["by_tid"], r["by_tgid"] = killer, PID
        self.recs.append(r)

    def write(self, path) -> str:
        b = LogBuilder(ncpu=2, target_pid=PID)
        b.header["rings"][str(M.RING_MEM)] = {"name": "mem", "record_size": M.MEM_EVENT.itemsize,
                                              "stride": ev.ring_stride(M.MEM_EVENT)}
        b.procs(us(0), [{"pid": PID, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
                         "threads": [{"tid": TID, "comm": "python3"}, {"tid": WORKER, "comm": "loader"}]},
                        {"pid": OTHER, "ppid": PID, "comm": "pt_data_worker", "cmdline": ["python3", "-c", "w"],
                         "threads": [{"tid": OTHER, "comm": "pt_data_worker"}]}])
        b.switch(us(0), 0, 5, TID, prev_tracked=False)
        b.switch(us(SPAN_US), 0, TID, 5, prev_state=1, next_tracked=False)
        b.flush()
        r = np.concatenate(self.recs) if self.recs else np.zeros(0, M.MEM_EVENT)
        for i in range(0, r.size, 50):
            b.blocks.append(("ring", (M.RING_MEM, ev.encode_ring_bytes(r[i:i + 50]))))
        return b.write(path, end=end_block(stop_ts=us(SPAN_US + 100)))


def scenario(case: str) -> MemLog:
    """stalls: direct reclaim of the loader thread, 40 x 3 ms over the recording, some across chunk
    boundaries (a warning), memcg reclaim of the main thread, 1.008 s in all (an error), compaction of the
    worker process (info), a requested compaction (left out); oom: also the worker killed by OOM (the
    main thread invoked the killer) and a process outside the job. none: no memory record but a
    requested compaction."""
    g = MemLog()
    if case != "none":
        for i in range(40):
            g.stall(M.MEM_DIRECT_RECLAIM, 98_500 + i * 25_000, 3000 + 7 * (i * 13 % 40), WORKER, majflt=10 + i)
        for i in range(6):
            g.stall(M.MEM_MEMCG_RECLAIM, 150_000 + i * 170_000, 168_000, TID, majflt=5)  # one thread's: never overlapping
        g.stall(M.MEM_COMPACTION, 610_000, 800, OTHER, tgid=OTHER)
        g.stall(M.MEM_COMPACTION, 640_000, 1500, OTHER, tgid=OTHER)
    g.stall(M.MEM_COMPACTION, 300_000, 9000, TID, order=-1)  # requested compaction
    if case == "oom":
        g.oom(1_100_000, OTHER, OTHER, "pt_data_worker", killer=TID)
        g.oom(700_000, 5555, 5555, "chrome", tracked=False)
    return g


def both(tmp_path, g: MemLog, split_ms=100):
    raw = g.write(tmp_path / "run.tlraw")
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    res = convert(raw, str(tmp_path / "set.pftrace"), split=SplitSpec(duration_ns=int(split_ms * 1e6)))
    with open(f"{res.out_path}/index.json") as f:
        index = json.load(f)
    return sql_findings(one, CHECK), set_result(res.out_path, CHECK), index, res.out_path


@pytest.mark.parametrize("case", ["stalls", "oom", "none"])
def test_partial_gives_the_sql_findings(tmp_path, case):
    (status, want), got, index, _ = both(tmp_path, scenario(case))
    assert CHECK in index.get("partials", {}) and len(index["chunks"]) >= 10
    assert got.note == FROM_INDEX
    assert (got.status, got.findings) == (status, want)
    text = [f.message for f in want]
    assert status == {"stalls": "error", "oom": "error", "none": "ok"}[case], text
    if case != "none":
        assert any(t.startswith("loader (tid 1001, thread of python3 pid 1000): ") and "40 stalls" in t
                   and "; 49 major faults so far" in t for t in text), text
        assert any("main thread of python3 pid 1000" in t and "memcg reclaim" in t for t in text), text
        assert any(t.startswith("pt_data_worker (tid 2000, main thread of python3 pid 2000)") for t in text), text
    if case == "oom":
        assert any("the OOM killer killed pt_data_worker (pid 2000) of this job" in t for t in text), text
        assert any("killed chrome (pid 5555), a process outside this job" in t for t in text), text


def test_other_parameters_run_the_sql(tmp_path):
    """The partial is checked with the default thresholds: others go through trace_processor per chunk."""
    from test_check_partials import TraceProcessorConfig, check_set, invoking_user

    _, got, _, path = both(tmp_path, scenario("stalls"), split_ms=300)
    assert got.note == FROM_INDEX
    other = check_set(path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=[CHECK], workers=1,
                      params={CHECK: {"warn_ms": 1, "error_ms": 5000}}).results[0]
    assert other.note != FROM_INDEX and other.status == "warning"


def test_no_partial_for_a_thread_the_converter_does_not_know(tmp_path):
    """A stall of a thread in no process the log names: the SQL prints what the trace's thread and
    process tables hold, which the partial does not model: it declines and the SQL decides."""
    g = scenario("none")
    g.stall(M.MEM_DIRECT_RECLAIM, 500_000, 2000, 7777, tgid=7777)
    (status, want), got, index, _ = both(tmp_path, g, split_ms=300)
    assert CHECK not in index.get("partials", {})
    assert got.note != FROM_INDEX and (got.status, got.findings) == (status, want)
