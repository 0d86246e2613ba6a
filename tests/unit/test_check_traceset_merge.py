"""Checks in map-reduce form over a synthetic trace set give the findings of
the whole trace (block_io's percentiles through its sketch: exact up to 4096
requests per device, else within 0.5%); checks not merged list a finding
said alike by several chunks once."""
from __future__ import annotations

import math

import pytest

from test_query_check import BOOT0, PID, TID
from traceset_factory import write_set, write_trace
from timeline.checks import run_checks
from timeline.checks.catalog import BY_ID
from timeline.checks.report import to_json
from timeline.checks.traceset import NOT_MERGED, _chunk_list, check_set, split_sql
from timeline.identity import invoking_user
from timeline.trace_processor import TraceProcessorConfig, open_trace

MS = 1_000_000
MERGED = ["cuda_errors", "cuda_graphs", "block_io", "cgroup_limits", "memory_pressure"]
TRACKS = [("main", dict(pid=PID, tid=TID, thread_name="python3")),
          ("loader", dict(pid=PID, tid=TID + 7, thread_name="loader")),
          ("disk", dict(name="nvme0n1")), ("disk2", dict(name="sda")), ("disk3", dict(name="sdb")), ("disk4", dict(name="sdc"))]
BOUNDS = [BOOT0, BOOT0 + 250 * MS, BOOT0 + 500 * MS, BOOT0 + 750 * MS, BOOT0 + 2000 * MS]
MANY = 5000  # requests on sda: past the 4096 shipped exactly, so its percentiles come from buckets


def sda_latency(i: int) -> int:
    return 2_000 + (i * 7919) % 97_000 + (i % 50 == 0) * 60_000  # ns, a tail every 50th


def slices():
    out = []
    t = BOOT0 + MS
    for i in range(300):  # nvme: 3.3 ms apart, every 30th request slow (> 50 ms: overlapping ones on disk3)
        slow = i % 30 == 7
        out.append(("disk3" if slow else "disk", t, (55 + i % 4) * MS if slow else 200_000 + i * 1000, "read",
                    "block_io", {"dev": "259:0", "bytes": 4096, "tid": TID + 7}))
        t += 3_300_000
    for i in range(MANY):
        out.append(("disk2", BOOT0 + 2 * MS + i * 190_000, sda_latency(i), "write", "block_io",
                    {"dev": "8:0", "bytes": 512, "tid": TID}))
    # a slow request across the chunk boundary at 500 ms, counted once with its whole latency
    out.append(("disk4", BOOT0 + 470 * MS, 70 * MS, "read", "block_io", {"dev": "259:0", "bytes": 8192,
                                                                          "tid": TID + 7}))
    t = BOOT0 + 3 * MS
    for g in range(12):  # graphs: 12 instantiations, 3 launches of each but the last, never launched
        out.append(("main", t, 900_000, "cudaStreamBeginCapture", "cuda", {"ret": 0}))
        out.append(("main", t + MS, 2 * MS, "cudaGraphInstantiate", "cuda", {"ret": 0, "exec": 100 + g}))
        for k in range(3 if g < 11 else 0):
            out.append(("main", t + (4 + k) * MS, 100_000, "cudaGraphLaunch", "cuda", {"ret": 0, "exec": 100 + g}))
        t += 61 * MS
    # an instantiation across the 250 ms boundary
    out.append(("loader", BOOT0 + 249 * MS, 3 * MS, "cudaGraphInstantiate", "cuda", {"ret": 0, "exec": 900}))
    out.append(("loader", BOOT0 + 600 * MS, MS, "cudaGraphLaunch", "cuda", {"ret": 0, "exec": 900}))
    for i in range(40):  # reclaim stalls on the loader thread, one across the 750 ms boundary
        out.append(("loader", BOOT0 + 700 * MS + i * 6 * MS, 2 * MS if i != 8 else 4 * MS, "direct reclaim",
                    "memory", {"major_faults": i}))
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    d = tmp_path_factory.mktemp("mset")
    whole = str(d / "whole.pftrace")
    write_trace(whole, TRACKS, slices())
    tset = write_set(d / "set", TRACKS, slices(), BOUNDS)
    with open_trace(whole, engine="wasm") as tp:
        want = to_json(run_checks(tp, whole))
    got = to_json(check_set(tset, TraceProcessorConfig(engine="wasm"), invoking_user(), workers=2))
    return {c["id"]: c for c in want["checks"]}, {c["id"]: c for c in got["checks"]}


@pytest.mark.parametrize("cid", MERGED)
def test_merged_check_equals_the_whole_trace(reports, cid):
    want, got = reports
    assert split_sql(BY_ID[cid].sql()) is not None
    assert got[cid]["status"] == want[cid]["status"]
    assert got[cid]["findings"] == want[cid]["findings"]
    assert got[cid].get("note") != NOT_MERGED


def test_the_scenario_is_seen(reports):
    want, got = reports
    g = got["cuda_graphs"]["findings"][0]
    assert g["evidence"]["instantiations"] == 13 and g["evidence"]["never_launched"] == 1
    assert g["evidence"]["launches"] == 34
    dev = {f["evidence"]["device"]: f for f in got["block_io"]["findings"] if "device" in f["evidence"]}
    assert "301 requests" in dev["259:0"]["finding"] and dev["259:0"]["evidence"]["max_ms"] == 70.0
    assert "loader (tid" in dev["259:0"]["finding"]
    assert got["cgroup_limits"]["status"] == "not recorded"
    mp = got["memory_pressure"]["findings"][0]
    assert mp["evidence"]["stalls"] == 40 and "longest 4.00 ms" in mp["finding"]


def test_sketch_percentiles(reports):
    _, got = reports
    dev = {f["evidence"]["device"]: f for f in got["block_io"]["findings"] if "device" in f["evidence"]}
    nvme = sorted([200_000 + i * 1000 for i in range(300) if i % 30 != 7] +
                  [(55 + i % 4) * MS for i in range(300) if i % 30 == 7] + [70 * MS])
    assert dev["259:0"]["evidence"]["p99_ms"] == round(nvme[math.ceil(0.99 * len(nvme)) - 1] / 1e6, 3)  # exact
    sda = sorted(sda_latency(i) for i in range(MANY))
    exact = sda[math.ceil(0.99 * MANY) - 1] / 1e6
    p99 = dev["8:0"]["evidence"]["p99_ms"]
    assert abs(p99 - exact) <= 0.005 * exact + 0.0005, (p99, exact)  # + the rounding to 3 decimals
    assert dev["8:0"]["evidence"]["max_ms"] == round(sda[-1] / 1e6, 3)  # the max is exact


def test_same_finding_in_several_chunks_is_listed_once(reports):
    _, got = reports
    for c in got.values():
        texts = [f["finding"].split(": ", 1)[-1] for f in c["findings"]]
        assert len(texts) == len(set(texts)), c["id"]
    assert _chunk_list([0, 1, 2, 4], 6) == "chunks 1-3, 5 of 6"
    assert _chunk_list([0, 1], 2) == "every chunk (2)"
