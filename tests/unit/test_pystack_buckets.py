"""CPU samples that found no Python stack (synthetic raw log, no BPF).

A sample of a thread with a thread state but no frame on it (PYF_NO_FRAME:
start-up, finalization, C entered without a frame) or whose stack could not
be read (PYF_FAULT) still took the thread's CPU: it is kept as a one-frame
stack naming why, in both formats, so the thread's samples add up to its
sampled CPU time.  A thread never seen with a Python stack gets no samples:
one with no thread state (PYF_NO_STATE: a C thread), one whose only samples
are failed searches, one whose thread state never held a frame (torch's
autograd device threads).
python_hotspots (and timeline diff) take their shares over all the main thread's samples and
name the buckets on a line of their own, never as a hot function.
"""
import numpy as np
import orjson
import pytest

from timeline import events as ev
from timeline.checks.runner import run_checks
from timeline.converters import convert
from timeline.pystack import probes
from timeline.pystack import records as R
from timeline.pystack.converter import LOST, NO_FRAME, UNREADABLE
from timeline.python_buckets import WITHOUT_STACK
from timeline.trace_processor import open_trace
from rawlog_factory import T, LogBuilder, end_block

PID, C_TID, C_FAULT_TID, C_STATE_TID = 20000, 20001, 20002, 20003
STACK = 0x5151
LOST_STACK = 0x7777  # taken, but its stack record never reached the log
PERIOD = 10_101_010  # 99 Hz
# the main thread: 60 samples in a Python function, then 30 without a frame, 10 unreadable
MAIN = [(STACK, 0)] * 60 + [(0, R.PYF_NO_FRAME)] * 30 + [(0, R.PYF_FAULT)] * 10
C_POOL = [(0, R.PYF_NO_STATE)] * 40                                     # a C thread: no samples
C_FAULT = [(0, R.PYF_FAULT)] * 5 + [(0, R.PYF_FAULT | R.PYF_NO_STATE)] * 5  # never seen with a state: none
C_STATE = [(0, R.PYF_NO_FRAME)] * 20 + [(0, R.PYF_FAULT)] * 2           # a state, never a frame: none
SAMPLES = """select f.name, count(*) from cpu_profile_stack_sample ps join thread t using (utid)
             join stack_profile_callsite c on c.id = ps.callsite_id join stack_profile_frame f on f.id = c.frame_id
             where t.tid = {tid} group by f.name order by f.name"""


def write_log(path, sample_hz=99, lost=0, main=MAIN):
    """sample_hz 0: the records are waits (the samples when the CPU timer is off); lost: that
    many more main-thread samples of a stack whose record is not in the log; main: the main
    thread's samples, (stack id, flags) each."""
    b = LogBuilder(target_pid=PID)
    b.header["clock"]["monotonic_ns"] = b.header["clock"]["boottime_ns"] - 1_000_000
    b.fork(T(1), 0, 999, 999, PID, PID, "python3", "timeline", launched=True)
    b.exec(T(2), 0, PID, "python3", ["python3", "train.py"])
    for tid in (C_TID, C_FAULT_TID, C_STATE_TID):
        b.fork(T(3), 0, PID, PID, tid, PID, "python3", "python3", thread=True)
    b.header["pystack"] = {"probes": probes.table(), "max_frames": 64, "sample_hz": sample_hz}
    b.flush()
    b.blocks.append(("meta", {"type": "py_stacks", "ts": T(4),
                              "frames": [[0, "spin", "/w/train.py", 12], [1, "<module>", "/w/train.py", 20]],
                              "stacks": [[PID, f"{STACK:x}", 0, [0, 1]]]}))
    rows = [(tid, i, sid, flags)
            for tid, samples in ((PID, main + [(LOST_STACK, 0)] * lost), (C_TID, C_POOL), (C_FAULT_TID, C_FAULT),
                                 (C_STATE_TID, C_STATE))
            for i, (sid, flags) in enumerate(samples)]
    a = np.zeros(len(rows), R.PY_EVENT)
    for k, (tid, i, sid, flags) in enumerate(rows):
        a[k] = (T(100) + i * PERIOD, 0 if sample_hz else 1000, sid, tid, PID, 0, 0,
                R.PY_SAMPLE if sample_hz else R.PY_WAIT, flags)
    a = a[np.argsort(a["ts"], kind="stable")]
    b.header["rings"][str(R.RING_PYSTACK)] = {"name": "pystack", "record_size": R.PY_EVENT.itemsize,
                                              "stride": ev.ring_stride(R.PY_EVENT)}
    b.blocks.append(("ring", (R.RING_PYSTACK, ev.encode_ring_bytes(a))))
    return b.write(str(path), end_block(stop_ts=T(100) + 200 * PERIOD))


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return write_log(tmp_path_factory.mktemp("buckets") / "b.tlraw")


def test_samples_without_a_stack_are_kept_as_the_reason_in_perfetto(raw, tmp_path):
    out = str(tmp_path / "b.pftrace")
    convert(raw, out)
    with open_trace(out) as tp:
        assert tp.query(SAMPLES.format(tid=PID)).rows == sorted([
            ("spin (train.py:12)", 60), (NO_FRAME, 30), (UNREADABLE, 10)])
        # a bucket is one frame: no caller
        assert tp.query(f"""select count(*) from stack_profile_callsite c join stack_profile_frame f
                            on f.id = c.frame_id where f.name in ('{NO_FRAME}', '{UNREADABLE}')
                            and (c.depth != 0 or c.parent_id is not null)""").rows == [(0,)]
        threads = tp.query("select distinct t.tid from cpu_profile_stack_sample join thread t using (utid)").rows
        assert threads == [(PID,)]  # no samples of the C threads

        res = next(r for r in run_checks(tp, out, only=["python_hotspots"]).results
                   if r.check.id == "python_hotspots")
    texts = [f.message for f in res.findings]
    assert texts[0].startswith("train.py:12 spin: 60% of the main thread's CPU samples in it (self)"), texts
    assert "of 100" in texts[0]
    assert not any(t.startswith(("<", ":")) or f" {NO_FRAME}:" in t for t in texts), texts
    assert any(t.startswith("30% of the main thread's CPU samples had no Python frame") for t in texts), texts
    assert any(t.startswith("10% of the main thread's CPU samples had a Python stack that could not be read")
               for t in texts), texts


def test_samples_without_a_stack_are_kept_as_the_reason_in_chrome_json(raw, tmp_path):
    out = str(tmp_path / "b.json")
    convert(raw, out)
    with open(out, "rb") as f:
        doc = orjson.loads(f.read())
    frames = doc["stackFrames"]
    got = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "i" and e.get("name") == "sample":
            f = frames[str(e["sf"])]
            key = (e["tid"], f["name"], e["args"]["py"], "parent" in f)
            got[key] = got.get(key, 0) + 1
    assert got == {(PID, "spin (train.py:12)", "train.py:12 spin \u2190 train.py:20 <module>", True): 60,
                   (PID, NO_FRAME, NO_FRAME, False): 30, (PID, UNREADABLE, UNREADABLE, False): 10}


def test_without_the_cpu_timer_waits_without_a_stack_are_bucketed_too(tmp_path):
    out = str(tmp_path / "w.pftrace")
    convert(write_log(tmp_path / "w.tlraw", sample_hz=0), out)
    with open_trace(out) as tp:
        assert tp.query(SAMPLES.replace("cpu_profile_stack_sample", "perf_sample").format(tid=PID)).rows == sorted([
            ("spin (train.py:12)", 60), (NO_FRAME, 30), (UNREADABLE, 10)])
        assert tp.query("select distinct t.tid from perf_sample join thread t using (utid)").rows == [(PID,)]
        # the wait slices' `py` arg still says no stack was taken
        assert tp.query("""select extract_arg(arg_set_id, 'debug.py'), count(*) from slice where name = 'wait'
                           group by 1 order by 1""").rows == [
            ("?", 30 + 10 + len(C_POOL) + len(C_FAULT) + len(C_STATE)), ("train.py:12 spin \u2190 train.py:20 <module>", 60)]


def test_samples_whose_stack_record_was_lost_are_kept_as_lost(tmp_path):
    """A sample names a stack id whose stack record the log lacks (its ring stayed full): it
    was spent in Python, so it counts, as '<Python stack lost>', and the check says so."""
    out = str(tmp_path / "l.pftrace")
    convert(write_log(tmp_path / "l.tlraw", lost=25), out)
    with open_trace(out) as tp:
        assert tp.query(SAMPLES.format(tid=PID)).rows == sorted([
            ("spin (train.py:12)", 60), (NO_FRAME, 30), (UNREADABLE, 10), (LOST, 25)])
        res = next(r for r in run_checks(tp, out, only=["python_hotspots"]).results
                   if r.check.id == "python_hotspots")
    texts = [f.message for f in res.findings]
    assert texts[0].startswith("train.py:12 spin: 48% of the main thread's CPU samples in it (self)"), texts
    assert any(t.startswith("20% of the main thread's CPU samples had a Python stack whose record was lost")
               for t in texts), texts
    js = str(tmp_path / "l.json")
    convert(str(tmp_path / "l.tlraw"), js)
    with open(js, "rb") as f:
        doc = orjson.loads(f.read())
    names = [doc["stackFrames"][str(e["sf"])]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "i" and e.get("name") == "sample" and e["tid"] == PID]
    assert names.count(LOST) == 25


def test_the_check_and_the_readers_know_the_bucket_names():
    """python_hotspots spells the buckets in SQL; the converter, timeline mcp and timeline diff
    take them from timeline/python_buckets.py, the one Python module that spells them."""
    import ast
    import os
    from timeline import python_buckets
    from timeline.checks import catalog
    from timeline.pystack import converter
    sql = catalog.BY_ID["python_hotspots"].sql()
    assert all(f"'{name}'" in sql for name in python_buckets.WITHOUT_STACK)
    assert set(python_buckets.WITHOUT_STACK) == {*converter.BUCKETS.values(), converter.LOST} == {NO_FRAME, UNREADABLE,
                                                                                               LOST}
    root = os.path.dirname(python_buckets.__file__)
    spelled = {os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files
               if f.endswith(".py") and any(isinstance(n, ast.Constant) and n.value in python_buckets.WITHOUT_STACK
                                            for n in ast.walk(ast.parse(open(os.path.join(d, f)).read())))}
    assert spelled == {"python_buckets.py"}, spelled


def test_the_agent_tools_set_the_buckets_apart(tmp_path):
    """The MCP samples query lists a bucket with its reason, its share of all samples kept."""
    from timeline.mcp import queries
    out = str(tmp_path / "m.pftrace")
    convert(write_log(tmp_path / "m.tlraw", lost=25), out)
    with open_trace(out) as tp:
        (utid,), = tp.query(f"select utid from thread where tid = {PID}").rows
        got = queries._samples(tp, 0, 2 ** 62, {"utid": utid, "tid": PID}, 10)
    assert got["samples"] == 125
    rows = {r["function"]: r for r in got["rows"]}
    assert "without_stack" not in rows["spin"] and rows["spin"]["self_share"] == 0.48
    for name, n in ((NO_FRAME, 30), (UNREADABLE, 10), (LOST, 25)):
        assert rows[name]["self_samples"] == n and rows[name]["without_stack"] == WITHOUT_STACK[name]


def test_timeline_diff_sets_the_buckets_apart(raw, tmp_path):
    """Two runs, the second with ten times the samples without a frame: timeline diff
    counts the bucket in the shares but lists it apart, with its reason, never as a
    function (it used to be the top row, 'Python: <no Python frame>', with no file)."""
    from timeline.diff import compare
    base, cand = str(tmp_path / "base.pftrace"), str(tmp_path / "cand.pftrace")
    convert(raw, base)
    convert(write_log(tmp_path / "c.tlraw", main=MAIN[:60] + [(0, R.PYF_NO_FRAME)] * 300 + MAIN[90:]), cand)
    report = compare(base, cand, checks=False)
    functions = {r.name: r for r in report.rows if r.section == "python"}
    assert set(functions) == {"spin (train.py)"}
    assert functions["spin (train.py)"].candidate == pytest.approx(60 / 370)  # a share of all samples
    got = {r.name: (r.baseline, r.candidate, r.without_stack) for r in report.without_stack}
    assert got == {NO_FRAME: (pytest.approx(0.3), pytest.approx(300 / 370), WITHOUT_STACK[NO_FRAME]),
                   UNREADABLE: (pytest.approx(0.1), pytest.approx(10 / 370), WITHOUT_STACK[UNREADABLE])}
    assert [r["name"] for r in report.to_json()["python_without_stack"]] == [NO_FRAME, UNREADABLE]
