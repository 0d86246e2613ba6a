"""net family: receives that blocked become 'recv blocked' slices (issue 24).

tests/system/net_recv_job.py blocks in recv() on loopback TCP connections for
known times (a peer waits until the receiver is inside recvfrom before its
delay starts, so a wait is at least the delay on any load) and reports what
each call took, measured around it.  A slice lasts from the syscall's entry to
its return, within that measure: a call measured shorter than the minimum can
have no slice, whatever the load; calls that waited at least the minimum have
exactly one.  Recorded three times: the default minimum (1 ms), 100 ms, and
0 (the receive-syscall probes off)."""
import json
import os
import sys

import pytest

from timeline.registry import FAMILIES
from timeline.trace_processor import open_trace
from helpers import require_root, timeline_cmd

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "net_recv_job.py")


def _record(tmp, *extra):
    require_root()
    if not FAMILIES["net"].supported():
        pytest.skip(f"net family: needs {FAMILIES['net'].requires}")
    path = str(tmp / "t.pftrace")
    cp = timeline_cmd("record", "-e", "net", *extra, "--keep-raw", "-o", path, "--", sys.executable, JOB, timeout=120)
    assert cp.returncode == 0, cp.stderr[-3000:]
    tp = open_trace(path)
    try:
        rows = tp.query("""
            select t.tid, s.ts, s.dur, extract_arg(s.arg_set_id, 'debug.bytes'), extract_arg(s.arg_set_id, 'debug.local'),
                   extract_arg(s.arg_set_id, 'debug.peer'), extract_arg(s.arg_set_id, 'debug.conn')
            from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
            where s.category = 'net' and s.name = 'recv blocked'""").rows
    finally:
        tp.close()
    by_tid: dict = {}
    for r in rows:
        by_tid.setdefault(r[0], []).append(r[1:])
    return json.loads(cp.stdout.strip().splitlines()[-1]), by_tid, path


@pytest.fixture(scope="module")
def min_1ms(tmp_path_factory):
    return _record(tmp_path_factory.mktemp("netrecv"), "--net-recv-min-ms", "1")


@pytest.fixture(scope="module")
def min_100ms(tmp_path_factory):
    return _record(tmp_path_factory.mktemp("netrecv"), "--net-recv-min-ms", "100")


def test_blocked_receive_is_one_slice_on_its_thread(min_1ms):
    job, slices, _ = min_1ms
    case = job["blocked"]
    (got,) = slices.get(case["tid"], [])  # exactly one
    _, dur, nbytes, local, peer, conn = got
    assert dur >= 250e6, got  # the peer sent 300 ms after the receiver was inside recvfrom
    assert dur <= case["calls"][0] * 1e9 + 1e6, (got, case)  # within the call, as measured around it
    assert (nbytes, local, peer) == (1234, case["local"], case["peer"]), got
    assert conn == f"{case['local']} ↔ {case['peer']}"


def _no_slice_unless_measured_long(case, slices, min_s):
    """None for a thread whose every call was measured below min_s; at most one per call otherwise."""
    got = slices.get(case["tid"], [])
    if max(case["calls"]) < min_s:
        assert got == [], (got, case)
    assert len(got) <= sum(c >= min_s for c in case["calls"]), (got, case)


def test_receive_answered_at_once_makes_no_slice(min_1ms):
    job, slices, _ = min_1ms
    _no_slice_unless_measured_long(job["immediate"], slices, 1e-3)


@pytest.mark.parametrize("name", ["nonblock", "polled"])
def test_nonblocking_socket_never_makes_a_slice(min_1ms, name):
    """A receive on an O_NONBLOCK socket cannot wait in the call: no slice
    however long the call took (the polled one copies megabytes, milliseconds
    here, after waiting in select(); a slice before the fix)."""
    job, slices, _ = min_1ms
    case = job[name]
    if name == "nonblock":
        assert case["bytes"] == [-1] * 20  # EAGAIN every time
    else:
        assert 0 < case["bytes"][0] <= case["sent"], case
    assert slices.get(case["tid"], []) == [], (slices.get(case["tid"]), case)


def test_blocking_socket_at_a_high_fd_is_a_slice(min_1ms):
    """Made non-blocking and blocking again, then dup'ed past the first fd
    table: what counts is the file's O_NONBLOCK at the call."""
    job, slices, _ = min_1ms
    (got,) = slices.get(job["highfd"]["tid"], [])
    assert got[1] >= 25e6 and got[2] == 100, got


def test_minimum_option(min_1ms, min_100ms):
    """30 ms waits are slices at 1 ms, not at 100 ms; the 300 ms one is in both;
    receives answered at once (short) are none at 100 ms."""
    job, slices, _ = min_1ms
    (medium,) = slices.get(job["medium"]["tid"], [])
    assert medium[1] >= 25e6 and medium[2] == 100, medium
    job, slices, _ = min_100ms
    assert len(slices.get(job["blocked"]["tid"], [])) == 1, slices
    for name in ("medium", "short", "immediate", "nonblock", "polled", "highfd"):
        _no_slice_unless_measured_long(job[name], slices, 0.1)
    assert min(job["short"]["calls"]) < 0.1  # at least one short call was checked


@pytest.mark.parametrize("extra", [(), ("--net-recv-min-ms", "0")], ids=["default", "zero"])
def test_off_by_default_and_at_zero(tmp_path, extra):
    job, slices, _ = _record(tmp_path, *extra)
    assert slices == {}, slices
    assert job["blocked"]["calls"][0] >= 0.3  # the receive did block


def test_bad_minimum_is_one_line(tmp_path):
    cp = timeline_cmd("record", "-e", "net", "--net-recv-min-ms", "nan", "-o", str(tmp_path / "x.pftrace"), "--",
                      "true")
    assert cp.returncode != 0
    assert "--net-recv-min-ms" in cp.stderr and "Traceback" not in cp.stderr, cp.stderr


def test_chrome_json_has_the_slice(min_1ms, tmp_path):
    job, _, path = min_1ms
    out = str(tmp_path / "t.json")
    cp = timeline_cmd("convert", "--format", "chrome", "-o", out, path[:-len(".pftrace")] + ".tlraw")
    assert cp.returncode == 0, cp.stderr
    events = [e for e in json.load(open(out))["traceEvents"] if e.get("name") == "recv blocked"]
    blocked = [e for e in events if e["tid"] == job["blocked"]["tid"]]
    assert len(blocked) == 1 and blocked[0]["ph"] == "X" and blocked[0]["dur"] >= 250e3, blocked
    assert blocked[0]["args"]["peer"] == job["blocked"]["peer"] and blocked[0]["args"]["bytes"] == 1234


def test_slice_in_the_ui(min_1ms, tmp_path):
    """The bundled Perfetto UI (headless Chromium) shows the receiving thread's
    track with its slice; screenshot to $TIMELINE_SCREENSHOT_DIR (docs/img/)."""
    import shutil
    import tempfile
    import time

    from test_view import Browser, Viewer

    job, _, path = min_1ms
    tp = open_trace(path)
    try:
        (pid,) = tp.query(f"select p.pid from thread t join process p using (upid) "
                          f"where t.tid = {job['blocked']['tid']}").rows[0]
    finally:
        tp.close()
    v = Viewer(path)
    browser = Browser(tempfile.mkdtemp(dir=tmp_path))
    try:
        browser.call("Emulation.setDeviceMetricsOverride", width=1600, height=900, deviceScaleFactor=1, mobile=False)
        browser.call("Page.navigate", url=v.url)
        browser.open_process(pid)
        txt = browser.wait_for_text(["recv-blocked", "recv-medium"], 60)
        time.sleep(1.5)
        shot = str(tmp_path / "net-recv-blocked.png")
        browser.screenshot(shot)
        if os.environ.get("TIMELINE_SCREENSHOT_DIR"):
            shutil.copy(shot, os.environ["TIMELINE_SCREENSHOT_DIR"])
        assert "recv-blocked" in txt, txt[-3000:]
    finally:
        browser.close()
        v.stop()
