"""The prelude by need: a selection of checks (`--only`, a trace set's chunks after the partials)
runs only the prelude statements its checks read."""
from __future__ import annotations

import os
import re

import pytest

from timeline.checks import run_checks
from timeline.checks.catalog import BY_ID, CATALOG
from timeline.checks.runner import _prelude_statements, prelude_needs, prelude_sql
from timeline.trace_processor import open_trace

HERE = os.path.dirname(os.path.abspath(__file__))
GPU_TRACE = os.path.join(HERE, "..", "..", "sample_traces", "train_gpu.pftrace")


def test_the_prelude_splits_into_one_definition_per_statement():
    text = prelude_sql()
    stmts = _prelude_statements(text)
    assert len(stmts) == len(re.findall(r"create or replace perfetto", text)) >= 20
    assert len({name for name, _ in stmts}) == len(stmts)
    assert all(";" not in body for _, body in stmts)


def test_each_check_needs_what_its_sql_names_and_what_that_reads():
    stmts = dict(_prelude_statements(prelude_sql()))
    for check in CATALOG:
        need = prelude_needs([check.sql()])
        named = {n for n in stmts if re.search(rf"\b{n}\b", check.sql())}
        assert named <= need, check.id
        for n in need:  # closed: what a needed statement reads is needed too
            assert {m for m in stmts if m != n and re.search(rf"\b{m}\b", stmts[n])} <= need, (check.id, n)
    assert prelude_needs([BY_ID["dropped_events"].sql()]) == set()
    assert "_tl_gpu_seg" not in prelude_needs([BY_ID["cuda_errors"].sql(), BY_ID["launch_latency"].sql()])
    assert {"_tl_gpu_seg", "tl_gpu_time", "tl_main_thread"} <= prelude_needs([BY_ID["gpu_breakdown"].sql()])


def test_a_selection_runs_only_its_statements():
    sql = prelude_sql([BY_ID["cuda_errors"]])
    assert "_tl_cuda" in sql and "_tl_gpu_seg" not in sql and "tl_main_thread" not in sql
    assert prelude_sql([]) == ""
    assert prelude_sql() == prelude_sql(None)  # every check: the whole file


@pytest.mark.parametrize("check", [c.id for c in CATALOG])
def test_each_check_alone_finds_what_it_finds_beside_all_the_others(check, all_checks):
    """A check run alone (its own prelude statements) on the real GPU trace gives the findings it
    gives in a run of every check (the whole prelude)."""
    with open_trace(GPU_TRACE, engine="wasm") as tp:
        alone = run_checks(tp, GPU_TRACE, only=[check]).results[0]
    whole = all_checks[check]
    assert (alone.status, alone.findings, alone.error) == (whole.status, whole.findings, whole.error)


@pytest.fixture(scope="module")
def all_checks():
    with open_trace(GPU_TRACE, engine="wasm") as tp:
        return {r.check.id: r for r in run_checks(tp, GPU_TRACE).results}
