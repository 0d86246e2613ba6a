"""Every record kind has a human name in the recorder's summary, whatever `-e` subset runs.

Regression: `-e sched,block` printed `5:1 77` instead of `block_io 77` because the
block family's names were added only when another module happened to be imported.
"""
import re
import sys
import textwrap

import pytest

from timeline.registry import FAMILIES
from helpers import require_root, timeline_cmd

WRITER = textwrap.dedent("""
    import os, sys
    path = sys.argv[1]
    with open(path, "wb") as f:
        for _ in range(8):
            f.write(os.urandom(1 << 16)); f.flush(); os.fsync(f.fileno())
    os.unlink(path)
""")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_alone_summary_names_every_kind(family, tmp_path):
    require_root()
    raw = str(tmp_path / "w.tlraw")
    cp = timeline_cmd("record", "--raw-only", "-e", family, "-o", raw, "--",
                      sys.executable, "-c", WRITER, str(tmp_path / "data.bin"))
    assert cp.returncode == 0, cp.stderr
    assert "target exited" in cp.stderr, cp.stderr
    unnamed = re.findall(r"(?<![\w.])\d+:\d+ \d+", cp.stderr)
    assert not unnamed, cp.stderr
    assert "rename" in cp.stderr or "fork" in cp.stderr or "exec" in cp.stderr, cp.stderr
