"""What both halves of the suite share: the import path, the `root` marker, fixtures.

tests/unit/    no root, no BPF, nothing recorded, timeline called in-process
               (`make test-fast`, or `pytest tests/unit` as any user)
tests/system/  real eBPF, root, recordings, the timeline command run as a process,
               a browser, pip (`sudo make test` runs them with the rest)

Every test under tests/system/ is marked `root` here, so `pytest -m "not root"`
selects the unit half too.
"""
from __future__ import annotations

import os
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
SYSTEM = os.path.join(TESTS, "system")

# helpers, rawlog_factory and standins live beside this file; a test module may
# import another by name (a system half takes the helpers of its unit half),
# whichever half pytest collects first.
for _path in (os.path.join(TESTS, "unit"), SYSTEM, TESTS):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from helpers import NOBODY, require_root  # noqa: E402 (needs the path above)
from standins import build_gpu  # noqa: E402


def pytest_collection_modifyitems(items):
    # the marker follows the directory: a test moved into tests/system/ is marked
    for item in items:
        if os.path.commonpath([str(item.path), SYSTEM]) == SYSTEM:
            item.add_marker(pytest.mark.root)


# Skip without root, fail in CI (helpers.require_root).
@pytest.fixture
def root():
    require_root()


@pytest.fixture
def udir():
    """A directory owned by uid 65534 that uid 65534 can reach (pytest's own
    tmp tree is root-only, which a writer with the user's identity cannot
    traverse); removed afterwards."""
    import shutil
    import tempfile

    d = tempfile.mkdtemp(prefix="tl-user-", dir="/tmp")
    os.chown(d, NOBODY, NOBODY)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# The stand-in CUDA driver, runtime, CUPTI and NVTX libraries (tests/standins), once per module.
@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    return build_gpu(str(tmp_path_factory.mktemp("gpu-standins")))


# timeline.trace_processor.open_trace, for the converter tests of both halves.
@pytest.fixture(scope="module")
def open_trace():
    tp = pytest.importorskip("timeline.trace_processor")
    return tp.open_trace


# The synthetic CUDA traces both halves of the query/check tests run on; they are
# built by tests/unit/test_query_check.py's helpers.
@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    from test_query_check import cuda_trace, graph_only_trace
    d = tmp_path_factory.mktemp("synthetic")
    return {"cuda_bad": cuda_trace(d / "bad", True), "cuda_ok": cuda_trace(d / "ok", False),
            "graph_only": graph_only_trace(d / "graph.pftrace")}
