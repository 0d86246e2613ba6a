"""`timeline record --split`: a real recording written as a trace set, checked
against the same raw log converted whole (docs/trace-sets.md)."""
from __future__ import annotations

import json
import os
import sys
import textwrap
from collections import Counter

import pytest

from helpers import require_root, timeline_cmd
import trace_set_paint
from trace_set_paint import STEP
from timeline.trace_processor import open_trace

pytestmark = pytest.mark.usefixtures("root")
painted = trace_set_paint.painted  # a fixture

WORKLOAD = textwrap.dedent("""
    import ctypes, threading, time
    libc = ctypes.CDLL(None)
    def worker(name):
        libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
        end = time.time() + 0.9
        while time.time() < end:
            x = sum(range(20000)); time.sleep(0.002)
    ts = [threading.Thread(target=worker, args=(f"worker-{i}",)) for i in range(2)]
    for t in ts: t.start()
    for t in ts: t.join()
""")

RUNNING = ("select t.tid, t.name, count(*) n, sum(s.dur) d from sched s join thread t using (utid) "
           "join process p using (upid) where p.pid = {pid} and s.dur > 0 group by t.tid")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    require_root()
    d = tmp_path_factory.mktemp("tset")
    out = str(d / "run.pftrace")
    cp = timeline_cmd("record", "--split", "250ms", "--keep-raw", "-o", out, "--", sys.executable, "-c", WORKLOAD)
    assert cp.returncode == 0, cp.stderr
    assert "trace set" in cp.stderr and os.path.isdir(d / "run.tlset"), cp.stderr
    whole = timeline_cmd("convert", str(d / "run.tlraw"), "-o", str(d / "whole.pftrace"), "--split", "off")
    assert whole.returncode == 0, whole.stderr
    return d


def test_every_chunk_loads_and_names_the_workers(recorded):
    idx = json.loads((recorded / "run.tlset" / "index.json").read_text())
    chunks = idx["chunks"]
    assert idx["format"] == "timeline-trace-set" and idx["source"] == "run.tlraw" and len(chunks) >= 4
    with open_trace(str(recorded / "whole.pftrace")) as tp:
        pid = tp.query("select int_value from metadata where name like 'cr-%timeline_command_pid'").rows[0][0]
        ref = {tid: (name, d) for tid, name, n, d in tp.query(RUNNING.format(pid=pid)).rows}
        lives = tp.query(f"select t.name, t.start_ts, t.end_ts from thread t join process p using (upid) "
                         f"where p.pid = {pid}").rows
        p_end = tp.query(f"select end_ts from process where pid = {pid}").rows[0][0]
    assert sorted(n for n, _ in ref.values() if n.startswith("worker")) == ["worker-0", "worker-1"]
    total = Counter()
    for c in chunks:
        with open_trace(str(recorded / "run.tlset" / c["file"])) as tp:
            # named in every chunk it is alive in (on a loaded machine the recording may go on
            # for a chunk after the process exited)
            n = tp.query(f"select count(*) from process where pid = {pid}").rows[0][0]
            assert n == 1 if p_end is None or c["start_ns"] < p_end else n <= 1, (c, p_end)
            names = dict(tp.query(f"select t.tid, t.name from thread t join process p using (upid) "
                                  f"where p.pid = {pid}").rows)
            # each thread alive during the chunk, with its name (the chunk names it at its start)
            alive = {n for n, a, b in lives if (a is None or a < c["end_ns"]) and (b is None or b > c["start_ns"])}
            assert set(names.values()) >= alive
            for tid, name, n, d in tp.query(RUNNING.format(pid=pid)).rows:
                total[tid] += d
    # the CPU time of each thread of the recorded process, rejoined across the chunks
    assert {tid: d for tid, (_, d) in ref.items()} == dict(total)


def test_a_chunk_passes_check_and_query_points_to_one(recorded):
    chunk = str(recorded / "run.tlset" / "chunk-0002.pftrace")
    cp = timeline_cmd("check", "--format", "json", "--only", "dropped_events", chunk)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["complete"] is True
    cp = timeline_cmd("query", str(recorded / "run.tlset"), "select 1")
    assert cp.returncode != 0 and "chunk-0001.pftrace" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1


@pytest.mark.usefixtures("painted")
def test_a_chunk_with_cut_slices_in_the_ui(tmp_path):
    """The bundled Perfetto UI, offline in headless Chromium (as tests/system/test_view.py does),
    on the chunk `view SET --at` picks: the processes are named, the cut slices drawn
    (the screenshot, docs/img/trace-set-chunk.png, shows them ending at the chunk's edges)."""
    import shutil
    import tempfile
    import time

    from rawlog_factory import scenario
    from test_view import Browser, Viewer
    from timeline.converters import convert
    from timeline.converters.trace_set import SplitSpec

    res = convert(scenario(tmp_path / "s.tlraw"), str(tmp_path / "s.pftrace"), split=SplitSpec(duration_ns=STEP))
    viewer = Viewer(res.out_path, "--at", "0.0003")  # the second chunk
    browser = Browser(tempfile.mkdtemp(dir=tmp_path))
    try:
        browser.call("Page.navigate", url=viewer.url)
        txt = browser.wait_for_text(["python3 1000", "GPU 0"])
        time.sleep(1)
        shot = str(tmp_path / "trace-set-chunk.png")
        browser.screenshot(shot)
        if os.environ.get("TIMELINE_SCREENSHOT_DIR"):
            shutil.copy(shot, os.environ["TIMELINE_SCREENSHOT_DIR"])
        assert "python3 1000" in txt and "chunk-0002.pftrace" in txt, txt[-2000:]
    finally:
        browser.close()
        _, err = viewer.stop()
    assert "chunk 2 of 5" in err and "chunk-0001.pftrace" in err and "chunk-0003.pftrace" in err


@pytest.mark.usefixtures("painted")
def test_flow_edge_markers_in_the_ui(tmp_path):
    """A launch at the end of chunk 1 whose kernel runs in chunk 2: in each chunk the bundled UI finds the
    edge marker and draws its flow (docs/img/trace-set-flow-out.png, trace-set-flow-in.png)."""
    import shutil
    import tempfile
    import time

    from rawlog_factory import scenario
    from test_pystack_view import find
    from test_view import Browser, Viewer
    from timeline.converters import convert
    from timeline.converters.trace_set import SplitSpec

    res = convert(scenario(tmp_path / "s.tlraw"), str(tmp_path / "s.pftrace"), split=SplitSpec(duration_ns=STEP))
    for at, marker, other, shot_name in (("0", "flow to chunk-0002", "cudaLaunchKernel", "trace-set-flow-out.png"),
                                         ("0.0002", "flow from chunk-0001", "late kernel", "trace-set-flow-in.png")):
        viewer = Viewer(res.out_path, "--at", at)
        browser = Browser(tempfile.mkdtemp(dir=tmp_path))
        try:
            browser.call("Emulation.setDeviceMetricsOverride", width=1600, height=1000, deviceScaleFactor=1,
                         mobile=False)
            browser.call("Page.navigate", url=viewer.url)
            browser.wait_for_text(["python3 1000", "GPU 0"], 90)
            time.sleep(1)
            find(browser, marker)
            # the details of the selected marker: its args and the flow to/from the end this chunk has
            txt = browser.wait_for_text(["timeline_flow_chunk", other], 60)
            time.sleep(0.5)
            shot = str(tmp_path / shot_name)
            browser.screenshot(shot)
            if os.environ.get("TIMELINE_SCREENSHOT_DIR"):
                shutil.copy(shot, os.environ["TIMELINE_SCREENSHOT_DIR"])
            assert "timeline_flow_chunk" in txt and other in txt and marker in txt, txt[-3000:]
        finally:
            browser.close()
            viewer.stop()


RING_WORKLOAD = textwrap.dedent("""
    import threading, time
    def nap():
        end = time.time() + 4
        while time.time() < end: time.sleep(0.002)
    ts = [threading.Thread(target=nap) for _ in range(2)]
    for t in ts: t.start()
    print("ready", flush=True)
    for t in ts: t.join()
""")


def test_ring_dumps_are_trace_sets_too(tmp_path):
    """--ring with --split: the SIGUSR2 dump and the trace at exit are each a set of the last window."""
    import signal
    import subprocess
    import time

    require_root()
    out = str(tmp_path / "r.pftrace")
    p = subprocess.Popen([sys.executable, "-m", "timeline.cli", "record", "-e", "sched", "--ring", "2s",
                          "--split", "500ms", "-o", out, "--", sys.executable, "-c", RING_WORKLOAD],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(2.5)
    os.kill(p.pid, signal.SIGUSR2)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "dump 1: wrote trace set" in err and "r.1.tlset" in err, err
    for name in ("r.1.tlset", "r.tlset"):
        idx = json.loads((tmp_path / name / "index.json").read_text())
        chunks = idx["chunks"]
        span = chunks[-1]["end_ns"] - chunks[0]["start_ns"]
        # the ring's window (2 s, give or take a drain) in 500 ms chunks, each a whole trace
        assert 1.5e9 <= span <= 2.6e9 and 3 <= len(chunks) <= 6, (name, span, len(chunks))
        assert all(c["switches"] > 0 for c in chunks), chunks
        with open_trace(str(tmp_path / name / chunks[-1]["file"])) as tp:
            assert tp.query("select count(*) from sched where dur > 0").rows[0][0] > 0
    assert not os.path.exists(tmp_path / "r.1.pftrace") and not os.path.exists(out)
