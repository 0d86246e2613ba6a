"""The pystack CPU samples in Perfetto traces (synthetic raw logs, no BPF).

Timer samples (--py-sample-hz) are StreamingProfilePacket runs, one packet
sequence per thread:
- a sample of a stack already interned is its callstack iid and its time
  since the thread's last sample in microseconds: 5 bytes at 99 Hz, nothing
  else; trace_processor files it in cpu_profile_stack_sample on its thread,
  at its time to the microsecond (the sequence's clock), with its stack;
- the stack sampled most gets a 1-byte callstack id even when a run's
  start-up sampled 200 other stacks before it;
- a trace set (convert --split) has every sample in the chunk of its time;
- `timeline merge` of two nodes' sampled traces keeps each sample on its
  node's thread, at its time moved by the node's clock shift, with its stack.
A recording whose header has no MONOTONIC reading (older recorders) keeps
PerfSample packets: a timestamp delta, a PerfSample of pid, tid and callstack
iid, and the sequence id, each needed by trace_processor v52
(docs/python-stacks.md).
"""
import os

import numpy as np

from timeline import events as ev
from timeline import trace_file
from timeline.converters import convert
from timeline.converters import merge_traces as mt
from timeline.converters.perfetto.wire import varint
from timeline.converters.trace_set import SplitSpec
from timeline.pystack import probes
from timeline.pystack import records as R
from timeline.trace_processor import open_trace
from rawlog_factory import T, LogBuilder, end_block

PID, WORKER_TID = 20000, 20001    # pids past 16383: three bytes as varints, as on most machines
FRAMES = [[0, "inner", "/w/train.py", 12], [1, "step", "/w/train.py", 57], [2, "main", "/w/train.py", 90]]
STACK = 0x77
PERIOD = 10_101_010               # 99 Hz
N = 200
PKT_TIMESTAMP, PKT_SEQUENCE_ID, PKT_SEQUENCE_FLAGS, PKT_PERF_SAMPLE = 8, 10, 13, 66
PKT_THREAD_DESCRIPTOR, PKT_STREAMING_PROFILE = 44, 54
PS_PID, PS_TID, PS_CALLSTACK = 2, 3, 4
SP_CALLSTACK, SP_DELTA_US = 1, 2
SAMPLES = """select ps.ts, t.tid, p.pid, f.name from cpu_profile_stack_sample ps join thread t using (utid)
             join process p using (upid) join stack_profile_callsite c on c.id = ps.callsite_id
             join stack_profile_frame f on f.id = c.frame_id"""


def write_log(path, realtime_shift_ns=0, startup=0, monotonic=True):
    """N samples of STACK on two threads, after `startup` samples of as many other stacks."""
    b = LogBuilder(target_pid=PID)
    b.header["clock"]["realtime_ns"] += realtime_shift_ns
    if monotonic:
        b.header["clock"]["monotonic_ns"] = b.header["clock"]["boottime_ns"] - 7_654_321  # not whole microseconds
    else:
        del b.header["clock"]["monotonic_ns"]
    b.fork(T(1), 0, 999, 999, PID, PID, "python3", "timeline", launched=True)
    b.exec(T(2), 0, PID, "python3", ["python3", "train.py"])
    b.fork(T(3), 0, PID, PID, WORKER_TID, PID, "python3", "python3", thread=True)
    b.header["pystack"] = {"probes": probes.table(), "max_frames": 64, "sample_hz": 99}
    b.flush()
    frames = FRAMES + [[3 + i, f"import{i}", "/w/lib.py", i + 1] for i in range(startup)]
    stacks = [[PID, f"{STACK + 1 + i:x}", 0, [3 + i, 2]] for i in range(startup)] + [[PID, f"{STACK:x}", 0, [0, 1, 2]]]
    b.blocks.append(("meta", {"type": "py_stacks", "ts": T(4), "frames": frames, "stacks": stacks}))
    n = startup + N
    a = np.zeros(n, R.PY_EVENT)
    a["ts"] = T(100) + np.arange(n) * PERIOD + np.arange(n) % 7  # odd nanoseconds: kept exactly
    a["tid"] = np.where(np.arange(n) % 2, WORKER_TID, PID)
    a["tgid"], a["kind"] = PID, R.PY_SAMPLE
    a["stack_id"] = np.concatenate([STACK + 1 + np.arange(startup), np.full(N, STACK)])
    b.header["rings"][str(R.RING_PYSTACK)] = {"name": "pystack", "record_size": R.PY_EVENT.itemsize,
                                              "stride": ev.ring_stride(R.PY_EVENT)}
    b.blocks.append(("ring", (R.RING_PYSTACK, ev.encode_ring_bytes(a))))
    b.write(str(path), end_block(stop_ts=T(100) + n * PERIOD))
    return a


def sample_packets(path, field=PKT_PERF_SAMPLE):
    data = memoryview(open(path, "rb").read())
    for a, b in trace_file.packet_spans(data):
        fields = list(trace_file.iter_fields(data[a:b]))
        if any(f[0] == field for f in fields):
            yield data[a:b], fields


def stream_samples(path):
    """(callstack iids, time deltas in us, bytes of the samples' fields) of every StreamingProfilePacket."""
    iids, deltas, size = [], [], 0
    for pkt, fields in sample_packets(path, PKT_STREAMING_PROFILE):
        sp = next(f for f in fields if f[0] == PKT_STREAMING_PROFILE)
        for g in trace_file.iter_fields(pkt[sp[3]:sp[4]]):
            (iids if g[0] == SP_CALLSTACK else deltas).append(g[2])
            size += g[4] - g[3] + 1  # the value and its 1-byte tag
    return iids, deltas, size


def to_the_us(recs_ts, off_ns=7_654_321):
    """Where trace_processor puts a sample taken at recs_ts: its MONOTONIC time cut to the microsecond."""
    t = recs_ts.astype(np.int64) - off_ns
    return (t - t % 1000 + off_ns).tolist()


def test_a_repeated_timer_sample_is_a_stack_id_and_a_time(tmp_path):
    recs = write_log(tmp_path / "s.tlraw")
    out = str(tmp_path / "s.pftrace")
    convert(str(tmp_path / "s.tlraw"), out)
    assert not list(sample_packets(out))  # no PerfSample
    iids, deltas, size = stream_samples(out)
    assert len(iids) == len(deltas) == N and len(set(iids)) == 1 and iids[0] < 128
    # two threads sampled in turn: each thread's first at its sequence's reference time, then
    # 2 periods apart, in microseconds
    assert deltas.count(0) == 2 and set(deltas) == {0, 2 * PERIOD // 1000, 2 * PERIOD // 1000 + 1}
    # tag + 1-byte callstack iid, tag + the time's varint (3 bytes for 20 ms: 2 threads at 99 Hz;
    # 2 for one thread's 10 ms): the issue asked for <= 16 bytes
    assert size == sum(3 + len(varint(d)) for d in deltas) <= 6 * N
    # the rest of the packets: each thread's sequence named once, framing shared by up to 1024 samples
    total = sum(len(pkt) for pkt, _ in sample_packets(out, PKT_STREAMING_PROFILE))
    assert total < 6.5 * N, total
    with open_trace(out) as tp:
        rows = tp.query(SAMPLES + " order by ps.ts").rows
        bad = tp.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0").rows
    assert not bad, bad
    assert [r[0] for r in rows] == to_the_us(recs["ts"])
    assert [r[1] for r in rows] == recs["tid"].tolist()
    assert {(r[2], r[3]) for r in rows} == {(PID, "inner (train.py:12)")}


def test_without_monotonic_a_sample_is_time_pid_tid_stack_and_sequence(tmp_path):
    recs = write_log(tmp_path / "a.tlraw", monotonic=False)
    out = str(tmp_path / "a.pftrace")
    convert(str(tmp_path / "a.tlraw"), out)
    packets = list(sample_packets(out))
    assert len(packets) == N
    for pkt, fields in packets[1:]:
        assert [f[0] for f in fields] == [PKT_TIMESTAMP, PKT_PERF_SAMPLE, PKT_SEQUENCE_ID]
        ps = fields[1]
        assert [g[0] for g in trace_file.iter_fields(pkt[ps[3]:ps[4]])] == [PS_PID, PS_TID, PS_CALLSTACK]
    with open_trace(out) as tp:
        rows = tp.query("""select ps.ts, t.tid, p.pid, f.name from perf_sample ps join thread t using (utid)
                           join process p using (upid) join stack_profile_callsite c on c.id = ps.callsite_id
                           join stack_profile_frame f on f.id = c.frame_id order by ps.ts""").rows
    assert [r[0] for r in rows] == recs["ts"].tolist()
    assert [r[1] for r in rows] == recs["tid"].tolist()
    assert {(r[2], r[3]) for r in rows} == {(PID, "inner (train.py:12)")}


def test_merged_nodes_keep_their_samples(tmp_path):
    shift = -5_000_000_000  # node b's wall clock 5 s behind for the same boot time: its times move 5 s earlier
    traces = []
    for name, rt in (("a", 0), ("b", shift)):
        recs = write_log(tmp_path / f"{name}.tlraw", rt)
        traces.append(str(tmp_path / f"{name}.pftrace"))
        convert(str(tmp_path / f"{name}.tlraw"), traces[-1])
    inputs = [mt.parse(p, open(p, "rb").read()) for p in traces]
    out = tmp_path / "job.pftrace"
    with open(out, "wb") as f:
        mt.merge(inputs, f.write)
    with open_trace(str(out)) as tp:
        rows = tp.query("""select coalesce(t.machine_id, 0), ps.ts, t.tid, p.pid, f.name from cpu_profile_stack_sample ps
                           join thread t using (utid) join process p using (upid)
                           join stack_profile_callsite c on c.id = ps.callsite_id
                           join stack_profile_frame f on f.id = c.frame_id order by 1, ps.ts""").rows
    by_node = [[r for r in rows if r[0] == m] for m in {r[0] for r in rows}]
    assert sorted(len(x) for x in by_node) == [N, N]
    a, b = sorted(by_node, key=lambda x: x[0][1], reverse=True)  # node b's samples are the earlier ones
    assert [r[1] for r in a] == to_the_us(recs["ts"])
    assert [r[1] for r in b] == (np.array(to_the_us(recs["ts"])) + shift).tolist()
    for node in (a, b):
        assert [r[2] for r in node] == recs["tid"].tolist()
        assert {(r[3], r[4]) for r in node} == {(PID, "inner (train.py:12)")}


def test_the_stack_sampled_most_gets_a_one_byte_id(tmp_path):
    startup = 200
    recs = write_log(tmp_path / "c.tlraw", startup=startup)
    out = str(tmp_path / "c.pftrace")
    convert(str(tmp_path / "c.tlraw"), out)
    iids, _, _ = stream_samples(out)
    # per thread, in time: both threads' start-up stacks first, then STACK
    assert len(iids) == startup + N and len(set(iids)) == startup + 1
    main = iids[:(startup + N + 1) // 2]
    assert len(set(main[-N // 2:])) == 1 and main[-1] < 128
    with open_trace(out) as tp:
        rows = tp.query("""select f.name, count(*) from cpu_profile_stack_sample ps join stack_profile_callsite c
                           on c.id = ps.callsite_id join stack_profile_frame f on f.id = c.frame_id
                           group by 1""").rows
    assert dict(rows) == {"inner (train.py:12)": N, **{f"import{i} (lib.py:{i + 1})": 1 for i in range(startup)}}
    assert recs.size == startup + N


def test_a_trace_set_has_every_sample_in_its_chunk(tmp_path):
    recs = write_log(tmp_path / "d.tlraw")
    res = convert(str(tmp_path / "d.tlraw"), str(tmp_path / "d.pftrace"), split=SplitSpec(duration_ns=N * PERIOD // 3))
    assert len(res.chunks) >= 3
    got = []
    for c in res.chunks:
        with open_trace(os.path.join(res.out_path, c["file"])) as tp:
            rows = tp.query(SAMPLES + " order by ps.ts").rows
        # each sample in the chunk of its time (cut to the microsecond: up to 1 us before the chunk)
        assert all(c["start_ns"] - 1000 < r[0] < c["end_ns"] for r in rows if c is not res.chunks[-1])
        got += rows
    assert [r[0] for r in got] == to_the_us(recs["ts"]) and [r[1] for r in got] == recs["tid"].tolist()
    assert {(r[2], r[3]) for r in got} == {(PID, "inner (train.py:12)")}


def test_a_worker_that_exited_before_its_samples_are_written_has_no_ghost(tmp_path):
    """The samples' thread descriptor is timestamped at the thread's first sample: a packet without
    a time is filed at the latest time trace_processor has read, here past the worker's exit, which
    made a second copy of the worker's process."""
    from helpers import assert_one_row_per_pid_and_tid
    worker = PID + 10
    b = LogBuilder(target_pid=PID)
    b.fork(T(1), 0, 999, 999, PID, PID, "python3", "timeline", launched=True)
    b.exec(T(2), 0, PID, "python3", ["python3", "train.py"])
    b.fork(T(3), 0, PID, PID, worker, worker, "python3", "python3")
    b.exit(T(50), 0, worker, worker, "python3", group_dead=True)
    b.switch(T(900), 0, PID, 0)  # the log reads on past the worker's exit before the samples come
    b.header["pystack"] = {"probes": probes.table(), "max_frames": 64, "sample_hz": 99}
    b.flush()
    b.blocks.append(("meta", {"type": "py_stacks", "ts": T(4), "frames": FRAMES,
                              "stacks": [[worker, f"{STACK:x}", 0, [0, 1, 2]]]}))
    a = np.zeros(20, R.PY_EVENT)
    a["ts"] = T(10) + np.arange(20) * 1_000_000
    a["tid"], a["tgid"], a["kind"], a["stack_id"] = worker, worker, R.PY_SAMPLE, STACK
    b.header["rings"][str(R.RING_PYSTACK)] = {"name": "pystack", "record_size": R.PY_EVENT.itemsize,
                                              "stride": ev.ring_stride(R.PY_EVENT)}
    b.blocks.append(("ring", (R.RING_PYSTACK, ev.encode_ring_bytes(a))))
    b.write(str(tmp_path / "w.tlraw"), end_block(stop_ts=T(1000)))
    out = str(tmp_path / "w.pftrace")
    convert(str(tmp_path / "w.tlraw"), out)
    with open_trace(out) as tp:
        assert_one_row_per_pid_and_tid(tp)
        rows = tp.query(f"select count(*) from cpu_profile_stack_sample join thread using (utid) "
                        f"where tid = {worker}").rows
    assert rows == [(20,)]
