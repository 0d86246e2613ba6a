"""`timeline check SET`: checks over a trace set, per chunk in a worker pool,
merged; the merged findings of a mergeable check equal a whole-trace run's."""
from __future__ import annotations

import json

import pytest

from test_query_check import BOOT0, PID, TID
from traceset_factory import write_set, write_trace
from timeline.checks import run_checks
from timeline.checks.report import to_json
from timeline.checks.traceset import NOT_MERGED, check_set, split_sql
from timeline.checks.catalog import BY_ID
from timeline.errors import UserError
from timeline.identity import invoking_user
from timeline.trace_processor import TraceProcessorConfig, open_trace

MS = 1_000_000
TRACKS = [("main", dict(pid=PID, tid=TID, thread_name="python3")),
          ("side", dict(pid=PID, tid=TID + 7, thread_name="pin_memory"))]


def slices():
    out = []
    t = BOOT0 + MS
    for i in range(400):  # 2.5 ms steps over 1 s, both threads
        ret = 2 if i % 97 == 5 else 700 if i == 301 else 0
        out.append(("main", t, 40_000, "cudaMalloc" if ret == 2 else "cudaLaunchKernel", "cuda",
                    {"ret": ret, "kernel": "k"}))
        out.append(("main", t + 100_000, 1000, "cudaStreamQuery", "cuda", {"ret": 600}))  # polling
        out.append(("side", t + 50_000, 30_000, "cudaMemcpyAsync", "cuda", {"ret": 35 if i == 7 else 0}))
        t += 2_500_000
    # failing calls that cross chunk boundaries: counted once, where they began
    out.append(("side", BOOT0 + 240 * MS, 30 * MS, "cudaMalloc", "cuda", {"ret": 2}))
    out.append(("side", BOOT0 + 480 * MS, 400 * MS, "cudaEventSynchronize", "cuda", {"ret": 719}))
    return out


BOUNDS = [BOOT0, BOOT0 + 250 * MS, BOOT0 + 500 * MS, BOOT0 + 750 * MS, BOOT0 + 2000 * MS]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("set")
    whole = str(d / "whole.pftrace")
    write_trace(whole, TRACKS, slices())
    return whole, write_set(d / "set", TRACKS, slices(), BOUNDS)


def test_mergeable_check_gives_the_whole_trace_findings(traces):
    whole, tset = traces
    assert split_sql(BY_ID["cuda_errors"].sql()) is not None
    with open_trace(whole, engine="wasm") as tp:
        want = to_json(run_checks(tp, whole))
    got = to_json(check_set(tset, TraceProcessorConfig(engine="wasm"), invoking_user(), workers=2))
    w = {c["id"]: c for c in want["checks"]}
    g = {c["id"]: c for c in got["checks"]}
    assert g["cuda_errors"]["findings"] == w["cuda_errors"]["findings"]
    assert g["cuda_errors"]["status"] == w["cuda_errors"]["status"] == "error"
    codes = {f["evidence"]["code"]: f["evidence"]["calls"] for f in g["cuda_errors"]["findings"]}
    assert codes == {2: 6, 35: 1, 700: 1, 719: 1}  # the cut cudaMalloc and the 3-chunk sync once each
    assert got["families"] == want["families"]
    assert (got["trace_start_ns"], got["trace_end_ns"]) == (want["trace_start_ns"], want["trace_end_ns"])
    # a check not in map-reduce form yet: run on each chunk, said so, each finding naming its chunk
    sync = g["sync_hotspots"]
    assert sync["note"] == NOT_MERGED and sync["findings"]
    assert all(f["finding"].startswith("chunk ") for f in sync["findings"])
    assert {f["finding"].split(":")[0].split(" (")[0] for f in sync["findings"]} == \
        {f"chunk {i}/4" for i in range(1, 5)}


def test_quiet_set_says_ok_like_the_whole_trace(tmp_path):
    calm = [s[:5] + ({"ret": 0 if s[5]["ret"] != 600 else 600},) for s in slices()]
    whole = str(tmp_path / "w.pftrace")
    write_trace(whole, TRACKS, calm)
    tset = write_set(tmp_path / "set", TRACKS, calm, BOUNDS)
    with open_trace(whole, engine="wasm") as tp:
        want = next(r for r in run_checks(tp, whole, only=["cuda_errors"]).results)
    got = check_set(tset, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=["cuda_errors"],
                    workers=1).results[0]
    assert [(f.severity, f.message) for f in got.findings] == [(f.severity, f.message) for f in want.findings]
    assert got.status == "ok" and "not ready" in got.findings[0].message


def test_bad_index_is_one_line(tmp_path):
    (tmp_path / "index.json").write_text(json.dumps({"format": "something-else", "version": 1}))
    with pytest.raises(UserError, match="not a timeline-trace-set version 1 index"):
        check_set(str(tmp_path), TraceProcessorConfig(engine="wasm"), invoking_user())
    (tmp_path / "index.json").write_text(json.dumps({"format": "timeline-trace-set", "version": 1,
                                                     "chunks": [{"file": "../x", "start_ns": 0, "end_ns": 1}]}))
    with pytest.raises(UserError, match="no plain file name"):
        check_set(str(tmp_path), TraceProcessorConfig(engine="wasm"), invoking_user())
