"""`timeline merge`: traces of several machines as one Perfetto trace.

Two real recordings stand for two nodes; "node b" is made to have booted 5 s
earlier than it did (every BOOTTIME timestamp of its trace moved, REALTIME
kept), which is what a second machine's trace looks like: the merge must put
its events back where they happened in wall-clock time.
"""
import os
import shutil
import sys

import pytest

from helpers import require_root, timeline_cmd
from timeline.converters import merge_traces as mt
from timeline.trace_processor import open_trace

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

WORKLOAD = "import time\nfor _ in range(20): time.sleep(0.005)\nprint('ok')"
OFFSET = 5_000_000_000


def _load(path):
    t = pb.Trace()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def as_other_node(src, dst, host, offset):
    """The trace as another machine would have written it: its BOOTTIME
    `offset` ns ahead, its host name `host`."""
    t = _load(src)
    for pkt in t.packet:
        mt._rewrite(pkt, 0, offset)
        if pkt.HasField("chrome_events"):
            for m in pkt.chrome_events.metadata:
                if m.name == "timeline_host":
                    m.string_value = host
    with open(dst, "wb") as f:
        f.write(t.SerializeToString())


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    require_root()
    d = tmp_path_factory.mktemp("merge")
    out = {}
    for name in ("a", "b"):
        path = str(d / f"{name}.pftrace")
        cp = timeline_cmd("record", "-q", "-e", "sched", "-o", path, "--", sys.executable, "-c", WORKLOAD)
        assert cp.returncode == 0, cp.stderr
        out[name] = path
    out["b_node"] = str(d / "b_node.pftrace")
    as_other_node(out["b"], out["b_node"], "node-b", OFFSET)
    out["dir"] = d
    return out


def first_process(tp, machine):
    where = "machine_id is null" if machine == 0 else f"machine_id = {machine}"
    return tp.query(f"select pid, start_ts from process where start_ts is not null and {where} "
                    "order by start_ts limit 1").as_dicts()[0]


def test_clock_offset_is_corrected(nodes):
    out = str(nodes["dir"] / "job.pftrace")
    cp = timeline_cmd("merge", nodes["a"], nodes["b_node"], "-o", out)
    assert cp.returncode == 0, cp.stderr
    assert "machine 1: node-b" in cp.stderr and "clock shift -5.000000 s" in cp.stderr, cp.stderr
    with open_trace(nodes["b"]) as tp:
        truth = first_process(tp, 0)
    with open_trace(out) as tp:
        machines = tp.query("select id, raw_id from machine order by id").rows
        assert [r[1] for r in machines] == [0, 1]
        got = first_process(tp, 1)
        # back within the error of two clock snapshots taken seconds apart: each
        # pair's read jitter, and REALTIME's slew between them (NTP: up to 500 ppm)
        assert got["pid"] == truth["pid"] and abs(got["start_ts"] - truth["start_ts"]) < 500_000, (got, truth)
        # node a's own times are untouched
        with open_trace(nodes["a"]) as ta:
            assert first_process(tp, 0) == first_process(ta, 0)
        hosts = dict(tp.query("select name, str_value from metadata where name like '%timeline_machine_host%'").rows)
        assert sorted(hosts.values()) == ["node-b", os.uname().nodename]


def test_colliding_pids_stay_apart(nodes):
    """The same trace twice: every pid and tid on two machines, nothing merged."""
    twin = str(nodes["dir"] / "twin.pftrace")
    shutil.copy(nodes["a"], twin)
    out = str(nodes["dir"] / "twins.pftrace")
    cp = timeline_cmd("merge", nodes["a"], twin, "-o", out)
    assert cp.returncode == 0, cp.stderr
    with open_trace(nodes["a"]) as tp:
        n_threads = tp.query("select count(*) from thread where tid > 0").rows[0][0]
        n_slices = tp.query("select count(*) from slice").rows[0][0]
        n_sched = tp.query("select count(*) from sched").rows[0][0]
        pid = first_process(tp, 0)["pid"]
    with open_trace(out) as tp:
        rows = tp.query(f"select machine_id from process where pid = {pid}").rows
        assert sorted(r[0] or 0 for r in rows) == [0, 1]
        assert tp.query("select count(*) from thread where tid > 0").rows[0][0] == 2 * n_threads
        assert tp.query("select count(*) from slice").rows[0][0] == 2 * n_slices
        assert tp.query("select count(*) from sched").rows[0][0] == 2 * n_sched
        # each machine's tracks are its own (uuids made distinct): no track holds both machines' slices
        mixed = tp.query("""select count(*) from (select s.track_id from slice s join thread_track tt on s.track_id = tt.id
                            join thread t using (utid) group by s.track_id having count(distinct coalesce(t.machine_id, 0)) > 1)""").rows
        assert mixed[0][0] == 0


def test_directory_and_glob_inputs(nodes):
    out = str(nodes["dir"] / "sub" / "all.pftrace")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    d = str(nodes["dir"] / "in")
    os.makedirs(d, exist_ok=True)
    for k in ("a", "b_node"):
        shutil.copy(nodes[k], d)
    cp = timeline_cmd("merge", d, "-o", out)
    assert cp.returncode == 0 and "2 machines" in cp.stderr, cp.stderr
    cp = timeline_cmd("merge", os.path.join(d, "*.pftrace"), "-o", out)
    assert cp.returncode == 0 and "2 machines" in cp.stderr, cp.stderr


@pytest.mark.parametrize("case", ["not_a_trace", "chrome_json", "empty", "one_input", "json_output", "merged_input"])
def test_bad_inputs_are_one_line(nodes, case, tmp_path):
    a = nodes["a"]
    bad = str(tmp_path / "bad.pftrace")
    out = str(tmp_path / "out.pftrace")
    args = [a, bad]
    if case == "not_a_trace":
        open(bad, "wb").write(b"\xff" * 64 + b"hello, not a trace")
        want = "is not a Perfetto protobuf trace"
    elif case == "chrome_json":
        bad = str(tmp_path / "t.json")
        open(bad, "w").write('{"traceEvents": []}')
        args, want = [a, bad], "Chrome JSON"
    elif case == "empty":
        open(bad, "wb").close()
        want = "is empty"
    elif case == "one_input":
        args, want = [a], "at least two traces"
    elif case == "json_output":
        args, out, want = [a, a], str(tmp_path / "o.json"), "Chrome JSON cannot hold several machines"
    else:
        first = str(tmp_path / "m.pftrace")
        assert timeline_cmd("merge", a, nodes["b_node"], "-o", first).returncode == 0
        args, want = [first, a], "already holds several machines"
    cp = timeline_cmd("merge", *args, "-o", out)
    assert cp.returncode != 0 and cp.stderr.count("\n") == 1 and want in cp.stderr, cp.stderr
    assert "Traceback" not in cp.stderr and not os.path.exists(out)


def test_far_apart_recordings_are_warned_about(nodes, tmp_path):
    """Two recordings an hour apart in wall-clock time cannot be one job's."""
    later = str(tmp_path / "later.pftrace")
    t = _load(nodes["b"])
    for pkt in t.packet:
        if pkt.HasField("clock_snapshot"):
            for c in pkt.clock_snapshot.clocks:
                if c.clock_id == mt.CLOCK_REALTIME:
                    c.timestamp += 3600 * 10**9
    open(later, "wb").write(t.SerializeToString())
    cp = timeline_cmd("merge", nodes["a"], later, "-o", str(tmp_path / "o.pftrace"))
    assert cp.returncode == 0 and "does not overlap the other recordings" in cp.stderr, cp.stderr


def test_merged_trace_shows_machines_apart_in_the_ui(nodes, tmp_path):
    """The bundled Perfetto UI, offline in headless Chromium (as tests/system/test_view.py
    does): the second machine's tracks are labelled as such."""
    import tempfile
    import time

    from test_view import Browser, Viewer

    out = str(tmp_path / "job.pftrace")
    assert timeline_cmd("merge", nodes["a"], nodes["b_node"], "-o", out).returncode == 0
    with open_trace(out) as tp:
        (pid_b,) = tp.query("select pid from process where machine_id = 1 and name is not null limit 1").rows[0]
    viewer = Viewer(out)
    browser = Browser(tempfile.mkdtemp(dir=tmp_path))
    try:
        browser.call("Page.navigate", url=viewer.url)
        txt = browser.wait_for_text(["(machine 1)"])
        time.sleep(1)
        shot = str(tmp_path / "merged.png")
        browser.screenshot(shot)
        if os.environ.get("TIMELINE_SCREENSHOT_DIR"):
            shutil.copy(shot, os.environ["TIMELINE_SCREENSHOT_DIR"])
        assert "(machine 1)" in txt and f"{pid_b} (machine 1)" in txt, txt[-2000:]
    finally:
        browser.close()
        viewer.stop()
