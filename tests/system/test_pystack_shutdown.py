"""CPU samples without a Python frame, in a real recording: tests/pystack_exit.py's
main thread spends its shutdown freeing what its last line built, in C with no
Python frame.  Those samples are kept on its samples track as one frame,
`<no Python frame>`, after the line's own (they used to be dropped: the track
showed less CPU than the thread used), and the bundled UI's flame graph shows
them beside the line (a canvas: look at the screenshot, which goes to
$TIMELINE_SCREENSHOT_DIR, docs/img/, if set)."""
import json
import os
import tempfile

import pytest

from timeline.pystack.converter import NO_FRAME
from timeline.trace_processor import open_trace
from helpers import REPO, require_root, timeline_cmd
from pystack_pythons import PYTHONS
from test_pystack_view import open_flame_graph
from test_view import Browser, Viewer, shoot

TARGET = os.path.join(REPO, "tests", "pystack_exit.py")
MAIN = next((PYTHONS[n] for n in ("pyenv-3.12", "pyenv-3.11", "pyenv-3.13", "pyenv-3.10", "debian-3.11")
             if n in PYTHONS), None)


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    require_root()
    if MAIN is None:
        pytest.skip("no supported CPython here")
    trace = str(tmp_path_factory.mktemp("pystack-exit") / "exit.pftrace")
    cp = timeline_cmd("record", "-e", "sched,pystack", "-o", trace, "--", MAIN, TARGET)
    assert cp.returncode == 0, cp.stderr
    return trace, json.loads(cp.stdout.strip().splitlines()[-1])["tid"]


def test_shutdown_samples_are_kept_as_no_python_frame(recording):
    trace, tid = recording
    build = next(i for i, t in enumerate(open(TARGET), 1) if t.rstrip().endswith("# BUILD"))
    with open_trace(trace) as tp:
        rows = tp.query(f"""select f.name, c.parent_id is null, ps.ts from cpu_profile_stack_sample ps
                            join thread t using (utid) join stack_profile_callsite c on c.id = ps.callsite_id
                            join stack_profile_frame f on f.id = c.frame_id where t.tid = {tid}""").rows
    built = [ts for name, _, ts in rows if name == f"<module> (pystack_exit.py:{build})"]
    assert built, rows
    assert all(root for name, root, _ in rows if name == NO_FRAME)  # one frame: nothing under it
    # the shutdown's free of 3 M dicts costs ~0.2 s of CPU here: ~20 samples at 99 Hz (the
    # print and threading's exit hook, in Python, may take one too)
    after = [name for name, _, ts in rows if ts > max(built)]
    assert after.count(NO_FRAME) >= 5, after


def test_flame_graph_in_the_ui(recording, tmp_path):
    v = Viewer(recording[0])
    browser = Browser(tempfile.mkdtemp(dir=tmp_path))
    try:
        open_flame_graph(browser, v.url)
        shoot(browser, tmp_path, "python-stacks-no-frame.png")
    finally:
        browser.close()
        v.stop()
