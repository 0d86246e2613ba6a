"""`timeline check` on a real recording (sched + the CUDA workload of
test_cuda_record) converted whole and as a trace set: every check in
map-reduce form gives the same findings both ways, and so does every check
that comes from a partial in the set's index."""
from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from helpers import REPO, require_root, timeline_cmd
from standins import build
from test_cuda_record import real_cudart
from timeline.checks import partials
from timeline.checks.catalog import CATALOG
from timeline.checks.traceset import FROM_INDEX, NOT_MERGED, split_sql

pytestmark = pytest.mark.usefixtures("root")
WORKLOAD = os.path.join(REPO, "tests", "standins", "cuda_workload.py")
MERGED = [c.id for c in CATALOG if split_sql(c.sql()) is not None]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    require_root()
    d = tmp_path_factory.mktemp("cset")
    libs = build(str(d))
    copies = []
    for sub in ("venv_a", "venv_b"):
        os.makedirs(d / sub)
        copies.append(str(shutil.copy(real_cudart(), d / sub / "libcudart.so.12")))
    raw = str(d / "run.tlraw")
    cp = timeline_cmd("record", "--raw-only", "-e", "sched,cuda", "-o", raw,
                      "--cuda-lib", libs["libcuda.so.1"], "--cuda-lib", libs["libcudart.so.12"],
                      "--cuda-lib", libs["libnccl.so.2"], "--", sys.executable, WORKLOAD, "real",
                      real_cudart(), str(d), raw, *copies, str(d))
    assert cp.returncode == 0, cp.stderr
    out = {}
    for name, split in (("whole.pftrace", "off"), ("split.pftrace", "100ms")):
        cv = timeline_cmd("convert", raw, "-o", str(d / name), "--split", split)
        assert cv.returncode == 0, cv.stderr
    tset = str(d / "split.tlset")
    chunks = json.loads(open(os.path.join(tset, "index.json")).read())["chunks"]
    for key, path in (("whole", str(d / "whole.pftrace")), ("split", tset)):
        ck = timeline_cmd("check", "--format", "json", path)
        assert ck.returncode in (0, 2), ck.stderr  # 2: a check could not run (said on stderr)
        out[key] = {c["id"]: c for c in json.loads(ck.stdout)["checks"]}
    return out, chunks


def test_split_into_several_chunks(reports):
    _, chunks = reports
    assert len(chunks) >= 3


@pytest.mark.parametrize("cid", MERGED)
def test_merged_check_is_the_same_split_and_whole(reports, cid):
    out, _ = reports
    want, got = out["whole"][cid], out["split"][cid]
    assert got.get("note") != NOT_MERGED
    assert (got["status"], got["findings"]) == (want["status"], want["findings"])


def test_the_recording_has_what_the_merged_checks_judge(reports):
    out, _ = reports
    ce = out["split"]["cuda_errors"]
    assert ce["status"] == "error" and any(f["evidence"].get("code") == 35 for f in ce["findings"])
    assert out["split"]["cuda_graphs"]["status"] in ("ok", "warning")


@pytest.mark.parametrize("cid", partials.check_ids())
def test_a_check_from_the_index_is_the_same_split_and_whole(reports, cid):
    """Where the converter wrote the check's partial, the set's findings are the one trace's."""
    out, _ = reports
    want, got = out["whole"][cid], out["split"][cid]
    if got.get("note") == FROM_INDEX or cid in MERGED:  # (a merged check's fallback is exact too)
        assert (got["status"], got["findings"]) == (want["status"], want["findings"])
    else:
        assert want["status"] == "not recorded" or got.get("note") == NOT_MERGED, (cid, got)


def test_the_sched_and_cuda_partials_were_written(reports):
    """The recording has scheduling and CUDA calls, no GPU activity: the checks on those come
    from the index (their partials did not decline on a real recording). hang's does here: the
    set starts after the log's first record, so its "since +x s" (from trace_start()) is not
    certain."""
    out, _ = reports
    from_index = {cid for cid in partials.check_ids() if out["split"][cid].get("note") == FROM_INDEX}
    assert {"cpu_contention", "input_stall", "launch_latency", "cuda_errors", "cuda_graphs",
            "alloc_churn"} <= from_index, from_index
