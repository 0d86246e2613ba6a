"""The injection library's slow checks: what `pip wheel` ships, and a recorder that never
reads (the 2 s send timeout). The rest: tests/unit/test_gpu_inject.py.
"""
from __future__ import annotations

import subprocess
import sys

from helpers import REPO

from test_gpu_inject import Server, run


def test_library_ships_in_the_wheel(libs, tmp_path):
    """What `pip install` gets: the built library, its sources and the shared header."""
    import zipfile
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", REPO,
                    "-w", str(tmp_path)], check=True, capture_output=True, text=True, timeout=300)
    (whl,) = tmp_path.glob("timeline-*.whl")
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        assert z.read("timeline/gpu/libtimeline_inject.so") == open(libs["libtimeline_inject.so"], "rb").read()
    assert {"timeline/gpu/records.h", "timeline/gpu/inject/inject.c", "timeline/bpf/build_inject.py"} <= names


def test_stuck_recorder_costs_at_most_the_send_timeout(libs):
    """A recorder that accepts but never reads: once the socket buffer is full the send
    times out (2 s), the connection is dropped, the rest is counted lost, the target ends."""
    import time
    t = time.monotonic()
    r, out, _ = run(libs, "basic", 40_000, Server(never_read=True))  # ~10 MB of records
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t < 30
