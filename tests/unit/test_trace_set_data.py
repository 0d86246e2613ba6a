"""A trace set's index says which of the checks' data it holds ("data", from CheckData.seen at
conversion), so `timeline check SET` says "not recorded" for a check with none of its data without
loading a chunk, as the runner would on the one trace."""
from __future__ import annotations

import json
import re

import pytest

from test_check_partials import training_log
from test_gpu_convert import GpuLog, full_log
from timeline.checks import traceset
from timeline.checks.catalog import BY_ID, DATA
from timeline.checks.runner import detect_families, run_checks
from timeline.checks.traceset import check_set
from timeline.converters import convert
from timeline.converters.trace_set import SplitSpec
from timeline.identity import invoking_user
from timeline.registry import CHECK_DATA
from timeline.trace_processor import TraceProcessorConfig, open_trace

ABSENT_HERE = ["block_io", "memory_pressure", "slow_ioctls", "net_retransmits", "net_throughput", "cgroup_limits"]


def _sql_parts(sql: str):
    """(categories, counter glob, samples) an existence test of CheckData.sql reads."""
    cats = set()
    for m in re.finditer(r"category\s+in\s*\(([^)]*)\)|category\s*=\s*'([^']*)'", sql):
        cats.update(re.findall(r"'([^']*)'", m.group(1)) if m.group(1) else [m.group(2)])
    glob = re.findall(r"counter_track where name glob '([^']*)'", sql)
    samples = "stack_sample" in sql or "perf_sample" in sql
    return cats, (glob[0] if glob else ""), samples


@pytest.mark.parametrize("d", CHECK_DATA, ids=lambda d: d.name)
def test_each_family_data_says_the_same_in_the_converters_terms(d):
    """Every family's CheckData has a converter-side test, and it reads what its SQL reads."""
    cats, glob, samples = _sql_parts(d.sql)
    assert (set(d.categories), d.counters, d.samples) == (cats, glob, samples), d.sql
    assert d.seen(set(), set(), False) is False
    if cats:
        assert d.seen({sorted(cats)[0]}, set(), False)
    if glob:
        assert d.seen(set(), {glob.replace("[0-9]", "3").replace("*", "x")}, False)
        assert not d.seen(set(), {"x" + glob}, False)
    if samples:
        assert d.seen(set(), set(), True)


def test_core_data_is_left_to_the_sql():
    assert all(d.seen({"cuda"}, {"x"}, True) is None for d in DATA if d not in CHECK_DATA)


def _converted(tmp_path, g):
    raw = g.write(tmp_path / "run.tlraw", block=200)
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    res = convert(raw, str(tmp_path / "set.pftrace"), split=SplitSpec(duration_ns=int(3e6)))
    with open(f"{res.out_path}/index.json") as f:
        return one, res.out_path, json.load(f)


def _stacked():
    return training_log(slow={}, stacks={(1, 0): "A", (5, 2): "B"})


@pytest.mark.parametrize("make", [full_log, _stacked], ids=["gpu", "gpu+pystack"])
def test_the_index_data_equals_the_sql_on_the_one_trace(tmp_path, make):
    one, path, index = _converted(tmp_path, make())
    with open_trace(one, engine="wasm") as tp:
        sql = detect_families(tp)
    data = index[traceset.DATA]
    assert set(data) == {d.name for d in CHECK_DATA}
    assert data == {k: sql[k] for k in data}
    assert data["cuda"] and data["gpu"] and not data["net"]
    assert len(index["chunks"]) > 1


def test_not_recorded_checks_load_no_chunk(tmp_path, monkeypatch):
    """The checks with none of their data come from the index, worded as the one trace's; none of
    the chunks is opened (run_jobs would fail)."""
    one, path, _ = _converted(tmp_path, full_log())
    with open_trace(one, engine="wasm") as tp:
        want = {r.check.id: (r.status, r.note) for r in run_checks(tp, one, only=ABSENT_HERE).results}
    assert {s for s, _ in want.values()} == {"not recorded"}

    def no_chunk(*a, **k):
        raise AssertionError("a chunk was loaded")
    monkeypatch.setattr("timeline.checks.executors.run_jobs", no_chunk)
    rep = check_set(path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=ABSENT_HERE, workers=1)
    assert {r.check.id: (r.status, r.note) for r in rep.results} == want
    assert rep.engine is None and rep.families["cuda"] and not rep.families["net"]


def test_a_set_without_data_loads_its_chunks(tmp_path):
    """A set written before "data": the chunks decide, with the same result."""
    _, path, index = _converted(tmp_path, GpuLog())
    del index[traceset.DATA]
    with open(f"{path}/index.json", "w") as f:
        json.dump(index, f)
    rep = check_set(path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=["block_io"], workers=1)
    assert rep.engine is not None
    assert [(r.status, r.note) for r in rep.results] == [("not recorded", "no block I/O request slices in this trace")]


def test_data_present_is_never_not_recorded(tmp_path):
    """A check whose data the index holds is never answered "not recorded" by it."""
    _, path, index = _converted(tmp_path, full_log())
    absent = traceset.absent_by_index(index, [c for c in BY_ID], None)
    assert "cuda_errors" not in absent and "kernel_outliers" not in absent
    assert set(ABSENT_HERE) <= set(absent)
