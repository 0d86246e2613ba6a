"""The recorded Python stack agrees with py-spy's, an independent reader.

A target parked in inner() (tests/pystack_target.py park: blocked reading
its stdin) is recorded; while it waits, `py-spy dump --json` reads its stack
from outside; then its stdin is closed, it wakes, and the wait's stack is in
the trace.  Both must name the same functions, files and lines.  py-spy
comes from the `test` extra (pyproject.toml); without it this is skipped.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from timeline.trace_processor import open_trace
from helpers import REPO, require_root
from pystack_pythons import PYTHONS, params
from test_cuda_record import slices

TARGET = os.path.join(REPO, "tests", "pystack_target.py")


def pyspy() -> str | None:
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return os.environ.get("TIMELINE_PYSPY") or (here if os.path.exists(here) else shutil.which("py-spy"))


@pytest.mark.parametrize("name", params())
def test_recorded_stack_matches_pyspy(tmp_path, name):
    require_root()
    spy = pyspy()
    if not spy:
        pytest.skip("py-spy is not installed (pip install py-spy, or the test extra)")
    trace = str(tmp_path / "park.pftrace")
    rec = subprocess.Popen([sys.executable, "-m", "timeline.cli", "record", "-e", "pystack", "--py-sample-hz", "0",
                            "-o", trace, "--",
                            PYTHONS[name], TARGET, "park"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "PYSTACK_TARGET_DELAY": "0.3"})  # found before it blocks
    try:
        info = json.loads(rec.stdout.readline())
        dump = subprocess.run([spy, "dump", "--json", "--pid", str(info["pid"])], capture_output=True, text=True,
                              timeout=60)
        assert dump.returncode == 0, dump.stderr
    finally:
        rec.stdin.close()  # the target wakes and exits
        rec.stdout.read()
        err = rec.stderr.read()
        rec.wait(timeout=120)
    assert rec.returncode == 0, err
    threads = json.loads(dump.stdout)
    spied = next(t for t in threads if t["os_thread_id"] == info["tid"])
    want = [(f["name"], f["filename"], f["line"]) for f in spied["frames"]]
    assert want[0][0] == "inner" and want[0][2] == info["lines"]["INNER_PIPE"]  # py-spy saw it parked

    tp = open_trace(trace)
    try:
        rows = [r for r in slices(tp, f"s.category = 'python' and s.name = 'wait' and t.tid = {info['tid']}")
                if " inner \u2190 " in " " + r["py"]]
        # py-spy stops the target to read it (ptrace): the read is interrupted and
        # restarted, so the wait comes in two parts, with one stack
        assert 1 <= len(rows) <= 2 and len({r["py"] for r in rows}) == 1, rows
        got = []
        cs = tp.query(f"""select ps.callsite_id from perf_sample ps join thread using (utid)
                          where thread.tid = {info['tid']} and ps.ts = {rows[0]['ts']}""").rows[0][0]
        while cs is not None:
            fname, cs = tp.query(f"""select f.name, c.parent_id from stack_profile_callsite c
                                     join stack_profile_frame f on f.id = c.frame_id where c.id = {cs}""").rows[0]
            got.append(fname)
    finally:
        tp.close()
    assert got == [f"{fn} ({os.path.basename(path)}:{line})" for fn, path, line in want]
    assert all(path == info["file"] for _, path, _ in want)
