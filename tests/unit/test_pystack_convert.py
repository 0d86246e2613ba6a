"""Converting the pystack family's records (no BPF): synthetic raw logs laid
out as the recorder writes them, read back through trace_processor.

- a stack taken at a cudaStreamSynchronize lands as the `py` arg on the cuda
  family's slice of that call (same thread, same function, nearest entry),
  and only there;
- waits become `wait` slices with their stack;
- CPU samples become cpu_profile_stack_samples (stacks at calls and waits,
  with sampling off, PerfSamples) resolving to the frames the recorder named;
- a malformed META (the raw log is input) costs its contents, never the conversion.
"""
import numpy as np
import orjson
import pytest

from timeline import events as ev
from timeline.converters import convert
from timeline.cuda import records as cuda_records
from timeline.cuda.probes import BY_NAME, table_meta
from timeline.pystack import probes
from timeline.pystack import records as R
from timeline.pystack.converter import LOST
from timeline.trace_processor import open_trace
from rawlog_factory import T, LogBuilder, end_block

PID, TID, OTHER_TID = 1000, 1000, 1001
SYNC = BY_NAME["cudaStreamSynchronize"]
FRAMES = [[0, "inner", "/w/train.py", 12], [1, "step", "/w/train.py", 57], [2, "main", "/w/train.py", 90],
          [3, "<module>", "/w/train.py", 95], [4, "load", "/w/data.py", 7]]
STACK_SYNC, STACK_WAIT = 0xABCDEF0123456789, 0x42


def _ring(b, ring, dtype, recs):
    b.header["rings"][str(ring)] = {"name": "x", "record_size": dtype.itemsize, "stride": ev.ring_stride(dtype)}
    b.blocks.append(("ring", (ring, ev.encode_ring_bytes(recs))))


def py_events(rows) -> np.ndarray:
    a = np.zeros(len(rows), R.PY_EVENT)
    for i, (kind, ts, dur, sid, tid, cookie) in enumerate(rows):
        a[i] = (ts, dur, sid, tid, PID, cookie, 0, kind, 0)
    return a


def cuda_calls(rows) -> np.ndarray:
    a = np.zeros(len(rows), cuda_records.CUDA_EVENT)
    for i, (ts, dur, tid) in enumerate(rows):
        a[i]["ts"], a[i]["dur"], a[i]["tid"], a[i]["tgid"] = ts, dur, tid, PID
        a[i]["cookie"], a[i]["kind"], a[i]["flags"] = SYNC.cookie(), cuda_records.CUDA_CALL, cuda_records.CF_HAS_RET
        a[i]["ret"] = 35
    return a


def write_log(path, sample_hz=0, metas=None, samples=0):
    b = LogBuilder()
    b.fork(T(1), 0, 999, 999, PID, PID, "python3", "timeline", launched=True)
    b.exec(T(2), 0, PID, "python3", ["python3", "train.py"])
    b.fork(T(3), 0, PID, PID, OTHER_TID, PID, "python3", "python3", thread=True)
    b.header["cuda"] = {"probes": table_meta(), "mode": "full"}
    b.header["pystack"] = {"probes": probes.table(), "max_frames": 64, "sample_hz": sample_hz}
    b.flush()
    for m in metas if metas is not None else [
            {"type": "py_stacks", "ts": T(4), "frames": FRAMES,
             "stacks": [[PID, f"{STACK_SYNC:x}", 0, [0, 1, 2, 3]], [PID, f"{STACK_WAIT:x}", R.PYF_TRUNC, [4, 2, 3]]]}]:
        b.blocks.append(("meta", m))
    # three syncs on TID; the stacks were taken 3 us before / 2 us after each call's entry
    calls = [(T(100), 5000, TID), (T(200), 5000, TID), (T(300), 5000, OTHER_TID)]
    _ring(b, cuda_records.RING_CUDA, cuda_records.CUDA_EVENT, cuda_calls(calls))
    rows = [(R.PY_CALL, T(100) - 3000, 0, STACK_SYNC, TID, SYNC.id),
            (R.PY_CALL, T(200) + 2000, 0, STACK_SYNC, TID, SYNC.id),
            (R.PY_WAIT, T(150), 10_000, STACK_WAIT, TID, 0),
            (R.PY_WAIT, T(160), 10_000, 0x999, OTHER_TID, 0)]  # a stack never sent: no arg
    rows += [(R.PY_SAMPLE, T(400) + i * 10_000_000 // max(samples, 1), 0, STACK_SYNC, TID, 0) for i in range(samples)]
    _ring(b, R.RING_PYSTACK, R.PY_EVENT, py_events(rows))
    return b.write(str(path), end_block(stop_ts=T(2000)))


def query_slices(tp, where):
    return tp.query(f"""select s.name, s.ts, s.dur, t.tid, extract_arg(s.arg_set_id, 'debug.py') as py
                        from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
                        where {where} order by s.ts""").rows


def test_stack_on_the_call_slice_and_wait_slices(tmp_path):
    raw = write_log(tmp_path / "a.tlraw")
    out = str(tmp_path / "a.pftrace")
    convert(raw, out)
    with open_trace(out) as tp:
        syncs = query_slices(tp, "s.name = 'cudaStreamSynchronize'")
        text = "train.py:12 inner \u2190 train.py:57 step \u2190 train.py:90 main \u2190 train.py:95 <module>"
        assert [(r[3], r[4]) for r in syncs] == [(TID, text), (TID, text), (OTHER_TID, None)]
        waits = query_slices(tp, "s.name = 'wait' and s.category = 'python'")
        assert [(r[1], r[2], r[3]) for r in waits] == [(T(150), 10_000, TID), (T(160), 10_000, OTHER_TID)]
        assert waits[0][4] == "data.py:7 load \u2190 train.py:90 main \u2190 train.py:95 <module> \u2190 " \
                             "<more than 64 frames>"
        assert waits[1][4] == "?"
        # sampling off: the stacks at calls and waits are the samples; the wait whose
        # stack never reached the log is one too, as '<Python stack lost>'
        rows = tp.query("""select t.tid, f.name from perf_sample ps join thread t using (utid)
                           join stack_profile_callsite c on c.id = ps.callsite_id
                           join stack_profile_frame f on f.id = c.frame_id order by ps.ts""").rows
        assert sorted(r[0] for r in rows) == [TID, TID, TID, OTHER_TID]
        assert [r[1] for r in rows if r[0] == OTHER_TID] == [LOST]


def test_cpu_samples_are_the_cpu_profile_samples_when_sampling_was_on(tmp_path):
    raw = write_log(tmp_path / "b.tlraw", sample_hz=99, samples=500)
    out = str(tmp_path / "b.pftrace")
    convert(raw, out)
    with open_trace(out) as tp:
        rows = tp.query("""select count(*), count(distinct callsite_id) from cpu_profile_stack_sample ps
                           join thread using (utid) where thread.tid = 1000""").rows
        assert rows == [(500, 1)]
        leaf = tp.query("""select f.name from cpu_profile_stack_sample ps
                           join stack_profile_callsite c on c.id = ps.callsite_id
                           join stack_profile_frame f on f.id = c.frame_id limit 1""").rows
        assert leaf == [("inner (train.py:12)",)]
        # the stacks at calls and waits are not samples then
        assert tp.query("select count(*) from perf_sample").rows == [(0,)]
    json_out = str(tmp_path / "b.json")
    convert(raw, json_out)  # Chrome JSON: the args and slices; samples are instants; stacks in stackFrames
    with open_trace(json_out) as tp:
        assert len(query_slices(tp, "s.name = 'wait'")) == 2
        assert len(query_slices(tp, "s.name = 'sample' and s.category = 'python' and s.dur = 0")) == 500
    with open(json_out, "rb") as f:
        doc = orjson.loads(f.read())
    frames = doc["stackFrames"]

    def chain(sf):
        out = []
        while sf is not None:
            out.append(frames[str(sf)]["name"])
            sf = frames[str(sf)].get("parent")
        return out
    sync_chain = ["inner (train.py:12)", "step (train.py:57)", "main (train.py:90)", "<module> (train.py:95)"]
    evs = doc["traceEvents"]
    samples = [e for e in evs if e.get("ph") == "i" and e.get("name") == "sample"]
    assert len(samples) == 500 and all(chain(e["sf"]) == sync_chain for e in samples)
    syncs = sorted((e["ts"], e["tid"], e.get("sf")) for e in evs if e.get("name") == "cudaStreamSynchronize")
    assert [chain(s) if s else None for _, _, s in syncs] == [sync_chain, sync_chain, None]
    waits = sorted((e["ts"], e.get("sf")) for e in evs if e.get("name") == "wait")
    assert chain(waits[0][1]) == ["load (data.py:7)", "main (train.py:90)", "<module> (train.py:95)",
                                  "<more than 64 frames>"]
    assert waits[1][1] is None  # its stack was never sent
    # frames are per (function, file, line, caller): main and <module> twice (two roots: truncated or not)
    assert len(frames) == 8 and frames[str(samples[0]["sf"])]["category"] == "/w/train.py"


@pytest.mark.parametrize("meta", [
    {"type": "py_stacks", "frames": "nope", "stacks": 5},
    {"type": "py_stacks", "frames": [[0, "f", "x.py"], ["a", 1, 2, 3], [1, None, None, "7"]],
     "stacks": [[PID, "zz", 0, [0]], [PID, "42", "x", "not a list"], ["pid", "42", 0, [0]], [PID, "42", 0, [0, 9, "x"]]]},
    {"type": "py_stacks"},
])
def test_malformed_metas_cost_only_their_contents(tmp_path, meta):
    raw = write_log(tmp_path / "c.tlraw", metas=[meta])
    out = str(tmp_path / "c.pftrace")
    convert(raw, out)
    with open_trace(out) as tp:
        assert len(query_slices(tp, "s.name = 'cudaStreamSynchronize'")) == 3
        assert len(query_slices(tp, "s.name = 'wait'")) == 2


def _launch_slices(stem, starts, py) -> list:
    """cudaLaunchKernel calls of 1 us at `starts` on the main thread and the pystack records `py`
    (stack STACK_SYNC), converted: the launch slices as query_slices gives them, in time order."""
    cu = cuda_calls([(s, 1000, TID) for s in starts])
    cu["cookie"] = BY_NAME["cudaLaunchKernel"].cookie()
    b = LogBuilder()
    b.fork(T(1), 0, 999, 999, PID, PID, "python3", "timeline", launched=True)
    b.exec(T(2), 0, PID, "python3", ["python3", "train.py"])
    b.header["cuda"] = {"probes": table_meta(), "mode": "full"}
    b.header["pystack"] = {"probes": probes.table(), "max_frames": 64, "sample_hz": 0}
    b.flush()
    b.blocks.append(("meta", {"type": "py_stacks", "ts": T(4), "frames": FRAMES,
                              "stacks": [[PID, f"{STACK_SYNC:x}", 0, [0, 1, 2, 3]]]}))
    _ring(b, cuda_records.RING_CUDA, cuda_records.CUDA_EVENT, cu)
    _ring(b, R.RING_PYSTACK, R.PY_EVENT, py)
    raw, out = f"{stem}.tlraw", f"{stem}.pftrace"
    b.write(raw, end_block(stop_ts=T(2000)))
    convert(raw, out)
    with open_trace(out) as tp:
        return query_slices(tp, "s.name = 'cudaLaunchKernel'")


def test_one_launch_in_n_gets_the_stack_it_was_taken_at(tmp_path):
    """Launches 2 us apart, a stack taken at every 4th: each stack lands on its own launch's slice,
    whichever of the two programs ran first (the stack's walk, [ts, ts + dur], delays the launch's
    entry when it ran first, by 20 us when cold: nearer the previous launch's entry than its own),
    and the launches between get none."""
    launch = BY_NAME["cudaLaunchKernel"]
    n, gap, walk = 40, 2000, 20_000
    starts, rows, t = [], [], T(500)
    for i in range(n):
        if i % 4 == 0 and i % 8:  # the stack program ran first: the launch's slice starts after its walk
            rows.append((R.PY_CALL, t, walk, STACK_SYNC, TID, launch.id))
            t += walk + 100
        starts.append(t)
        if i % 8 == 0:            # the cuda program ran first
            rows.append((R.PY_CALL, t + 300, 800, STACK_SYNC, TID, launch.id))
            t += 1100
        t += gap
    got = _launch_slices(tmp_path / "l", starts, py_events(rows))
    assert len(got) == n
    assert [i for i, r in enumerate(got) if r[4] is not None] == list(range(0, n, 4))
    assert {r[4] for r in got if r[4] is not None} == {"train.py:12 inner \u2190 train.py:57 step \u2190 "
                                                       "train.py:90 main \u2190 train.py:95 <module>"}


def _code_table():
    """A real function's code object: its line table as CPython keeps it, and
    (byte offset, line) of each of its instructions, from co_lines()."""
    def sample(a):
        b = a + 1
        if b > 2:
            b *= 3
        return b
    co = sample.__code__
    lines = [(start, line) for start, end, line in co.co_lines() if line is not None and end > start]
    return co, lines


def test_frames_as_code_objects_are_named_from_their_line_tables(tmp_path):
    """The recorder writes (code object, instruction) frames and each code
    object's line table once: conversion decodes the lines; two offsets on one
    line are one frame; an unknown code id or a damaged table never fails it."""
    import base64
    import sys
    co, lines = _code_table()
    minor = 10 if sys.version_info[:2] == (3, 10) else 11
    (off1, line1), (off2, line2) = lines[1], lines[-1]
    same = next(o for o, ln in lines if ln == line1 and o != off1) if sum(ln == line1 for _, ln in lines) > 1 else off1
    codes = [[7, "outer.<locals>.sample", "/w/m.py", co.co_firstlineno, minor, base64.b64encode(co.co_linetable).decode()],
             [8, "broken", "/w/b.py", 40, 11, "***not base64***"]]
    frames = [[0, 7, off1], [1, 7, off2], [2, 7, same], [3, 99, 0], [4, 8, 6], [5, "<unresolved>", "", 0]]
    meta = {"type": "py_stacks", "ts": T(4), "codes": codes, "frames": frames,
            "stacks": [[PID, f"{STACK_SYNC:x}", 0, [0, 1, 3, 4, 5]], [PID, f"{STACK_WAIT:x}", 0, [2, 1]]]}
    raw = write_log(tmp_path / "c.tlraw", metas=[meta])
    out = str(tmp_path / "c.pftrace")
    convert(raw, out)
    with open_trace(out) as tp:
        got = [r[4] for r in query_slices(tp, "s.name = 'cudaStreamSynchronize'")]
        waits = [r[4] for r in query_slices(tp, "s.name = 'wait'")]
    want = (f"m.py:{line1} outer.<locals>.sample \u2190 m.py:{line2} outer.<locals>.sample \u2190 "
            "<unknown code> \u2190 b.py:40 broken \u2190 <unresolved>")
    assert got[:2] == [want, want] and line1 != line2
    assert waits[0] == f"m.py:{line1} outer.<locals>.sample \u2190 m.py:{line2} outer.<locals>.sample"


def test_hooked_stacks_land_on_the_slice_that_started_before_them(tmp_path):
    """PYF_HOOKED: the stack was taken by the cuda family's program of the same hit (a tail
    call), so after its slice's entry: a thread's first call, slow in both programs (storage
    made, the new stack sent: 45 us late, a 20 us walk), must not go to the next launch whose
    entry is nearer the walk's end; without the flag it would (the order is unknown then)."""
    launch = BY_NAME["cudaLaunchKernel"]
    starts = [T(500)] + [T(500) + 62_000 + i * 5000 for i in range(5)]
    late = [45_800] + [700] * 5
    walks = [20_000] + [800] * 5

    def log(flags: int) -> list:
        rows = [(R.PY_CALL, s + d, w, STACK_SYNC, TID, launch.id) for s, d, w in zip(starts, late, walks)]
        py = py_events(rows)
        py["flags"] = flags
        return [r[4] is not None for r in _launch_slices(tmp_path / f"h{flags}", starts, py)]

    assert log(R.PYF_HOOKED) == [True] * len(starts)
    assert log(0)[0] is False  # the unflagged rule, fooled by this timing: why the flag exists
