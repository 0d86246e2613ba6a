"""What both halves of the suite share: the import path and the `root` marker.

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


def pytest_collection_modifyitems(items):
    # the marker follows the directory: a test moved into tests/system/ is marked
    for item in items:
        if os.path.commonpath([str(item.path), SYSTEM]) == SYSTEM:
            item.add_marker(pytest.mark.root)
