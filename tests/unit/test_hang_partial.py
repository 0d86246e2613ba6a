"""hang from a trace set's index (timeline/checks/partials/hang.py): what each thread was stuck in at
the end of the one recording, as its SQL says on the log converted as one trace (per chunk, the SQL
would see each chunk's end as the end)."""
from __future__ import annotations

import json

import pytest

from test_check_partials import set_result, sql_findings
from test_gpu_convert import TID, WORKER, GpuLog, us
from timeline.checks.traceset import FROM_INDEX, NOT_MERGED
from timeline.converters import convert
from timeline.converters.trace_set import SplitSpec
from timeline.sched_records import RING_SCHED

CHECK = "hang"
S, D = 1, 2  # prev_state bits


class HangLog(GpuLog):
    """3 s: the main thread launches a few kernels, then sits in cudaStreamSynchronize from 1 s to the
    end (asleep inside it); the second thread goes into an uninterruptible wait (D) at 0.5 s for good.
    healthy: the sync ends at 1.5 s, both threads run until 1 ms before the end."""

    def __init__(self, healthy=False):
        super().__init__(span_us=3_000_000)
        self.healthy = healthy
        name = self.string(1, "k")
        for i in range(5):
            self.launch("cudaLaunchKernel", us(2000 + 100 * i), 5000, [(name, us(2010 + 100 * i), us(2030 + 100 * i))])
        self.call("cudaStreamSynchronize", us(1_000_000), 1000 * (500_000 if healthy else self.span_us - 1_000_000))

    def builder(self):
        b = super().builder()
        b._sched = []
        b.blocks = [x for x in b.blocks if not (x[0] == "ring" and x[1][0] == RING_SCHED)]
        b.switch(us(0), 0, 5, TID, prev_tracked=False)
        end = self.span_us - 1000
        b.switch(us(end if self.healthy else 1_000_100), 0, TID, 5, prev_state=S, next_tracked=False)
        b.switch(us(10), 1, 6, WORKER, prev_tracked=False)
        b.switch(us(end + 500 if self.healthy else 500_000), 1, WORKER, 6, prev_state=D, next_tracked=False)
        b.flush()
        return b


def both(tmp_path, g, split_ms=300):
    raw = g.write(tmp_path / "run.tlraw", block=200)
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    res = convert(raw, str(tmp_path / "set.pftrace"), split=SplitSpec(duration_ns=int(split_ms * 1e6)))
    with open(f"{res.out_path}/index.json") as f:
        index = json.load(f)
    return sql_findings(one, CHECK), set_result(res.out_path, CHECK), index, res.out_path


@pytest.mark.parametrize("case", ["stuck", "none"])
def test_partial_gives_the_sql_findings(tmp_path, case):
    """A thread in a CUDA call at the end (error) and one in D (info); a run that ends healthy (no
    finding): the set's findings from its index equal the one trace's SQL, over 10 chunks."""
    (status, want), got, index, _ = both(tmp_path, HangLog(healthy=case == "none"))
    assert CHECK in index.get("partials", {}) and len(index["chunks"]) >= 10
    assert got.note == FROM_INDEX and (got.status, got.findings) == (status, want)
    if case == "stuck":
        assert [f.severity for f in want] == ["error", "info"], want
        assert "in cudaStreamSynchronize since +1.000 s" in want[0].message
        assert "uninterruptible wait (D) since +0.500 s" in want[1].message
    else:
        assert want == [] and status == "ok"


def test_per_chunk_the_sql_sees_each_chunks_end(tmp_path):
    """Why the partial: without it (the index's partials taken out, as in a set written before them)
    each chunk is checked to its own end: the call is reported per chunk, from each chunk's start, and
    the thread in D, asleep across the last chunk boundaries, not at all."""
    (status, want), got, index, path = both(tmp_path, HangLog())
    index.pop("partials")
    for c in index["chunks"]:
        c.pop("partials", None)
    with open(f"{path}/index.json", "w") as f:
        json.dump(index, f)
    per_chunk = set_result(path, CHECK)
    assert per_chunk.note == NOT_MERGED and got.note == FROM_INDEX
    assert [f.message for f in per_chunk.findings] != [f.message for f in want]
    assert not any("(D)" in f.message for f in per_chunk.findings) and any("(D)" in f.message for f in want)


def test_no_partial_where_the_sched_columns_decline(tmp_path, monkeypatch):
    """Over _sched.py's row cap its switches are let go: that must not read as "no thread asleep" (the
    partial would say ok where the SQL finds the stuck threads): no partial, the SQL runs."""
    from timeline.checks.partials import _sched

    monkeypatch.setattr(_sched, "MAX_ROWS", 3)
    want, got, index, _ = both(tmp_path, HangLog())
    assert CHECK not in index.get("partials", {}) and got.note != FROM_INDEX
    assert want[0] == "error"
