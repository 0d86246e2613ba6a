"""Converters: raw log -> Perfetto protobuf / Chrome JSON, read back with
trace_processor (timeline.trace_processor) to check what a user would see."""
from __future__ import annotations

import gzip
import os
import stat

import numpy as np
import orjson
import pytest

from rawlog_factory import T, LogBuilder, end_block, scenario

from timeline import proc_records, sched_records
from timeline.converters import ConvertResult, convert, format_for
from timeline.converters.chrome.writer import JSON_IDLE_TID, state_str
from timeline.converters.model import OUTSIDE_TID
from timeline.converters.perfetto.wire import packed_varints
from timeline.rawlog import RawLogError, RawLogReader

O = OUTSIDE_TID  # the one pseudo thread for tasks outside the recording; tid 0 is idle

# (cpu, ts, end ts or None, tid, end_state) of every sched slice in the scenario:
# idle where a recorded switch went to the idle task, "outside" only where an
# untracked task ran (77 at T(150), 88 from the TL_SF_LEFT_IDLE record at T(450))
SCHED = [
    (0, T(15), T(60), 1000, "S"), (0, T(60), T(80), 0, "R"), (0, T(80), T(100), 1000, "R+"),
    (0, T(100), T(150), 1002, "D"), (0, T(150), T(170), O, "R"), (0, T(170), T(180), 1002, "S"),
    (0, T(180), T(390), 1000, "S"), (0, T(390), T(405), 1002, "X"), (0, T(405), T(450), 0, "R"),
    (0, T(450), T(500), O, "R"), (0, T(500), T(600), 1000, "S"), (0, T(600), None, 0, None),
    (1, T(35), T(90), 1001, "S"), (1, T(90), T(120), 0, "R"), (1, T(120), T(190), 1001, "S"),
    (1, T(190), T(206), 0, "R"), (1, T(206), T(301), 1100, "Z"), (1, T(301), T(360), 0, "R"),
    (1, T(360), T(700), 1001, "D"), (1, T(700), None, 0, None),
]
# thread_state of 1000 and 1002 from their first switch-in on: (ts, end, state, waker tid)
STATES = {
    1000: [(T(15), T(60), "Running", None), (T(60), T(70), "S", None), (T(70), T(80), "R", 0),
           (T(80), T(100), "Running", None), (T(100), T(180), "R+", None),
           (T(180), T(390), "Running", None), (T(390), T(500), "S", None),
           (T(500), T(600), "Running", None), (T(600), None, "S", None)],
    1002: [(T(100), T(150), "Running", None), (T(150), T(160), "D", None), (T(160), T(170), "R", O),
           (T(170), T(180), "Running", None), (T(180), T(390), "S", None),
           (T(390), T(405), "Running", None), (T(405), None, "X", None)],
}
NAMES = {1000: "python3", 1001: "loader0", 1002: "pt_autograd", 1100: "nvidia-smi", O: "outside the recording"}
N_RECORDS = 37  # sched + proc records in the scenario


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return scenario(tmp_path_factory.mktemp("raw") / "run.tlraw")


def _convert(raw, tmp_path_factory, name, fmt=None):
    out = str(tmp_path_factory.mktemp("out") / name)
    seen = []
    res = convert(raw, out, fmt=fmt, progress=lambda d, t: seen.append((d, t)))
    return out, res, seen


@pytest.fixture(scope="module", params=["run.pftrace", "run.json", "run.json.gz"])
def converted(request, raw, tmp_path_factory, open_trace):
    out, res, seen = _convert(raw, tmp_path_factory, request.param)
    with open_trace(out) as tp:
        yield request.param, out, res, seen, tp


def q(tp, sql):
    return tp.query(sql).rows


def tid_of(tp):
    """utid -> tid, the idle task's pseudo thread of Chrome JSON (JSON_IDLE_TID) read as 0."""
    return {u: 0 if t == JSON_IDLE_TID else t for u, t in q(tp, "select utid, tid from thread")}


# ------------------------------------------------------------------ both formats

def test_result_and_file(converted):
    name, out, res, seen, _ = converted
    assert isinstance(res, ConvertResult)
    assert res.events == N_RECORDS
    assert res.damage is None and res.finalized
    assert res.drops == {"sched": 3, "proc": 1}
    assert res.out_bytes == os.path.getsize(out) > 0
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)  # progress only moves forward
    assert seen[-1][0] == seen[-1][1]
    assert not [f for f in os.listdir(os.path.dirname(out)) if f.startswith(".tl-convert-")]


def test_sched_slices(converted):
    _, _, _, _, tp = converted
    tids = tid_of(tp)
    rows = q(tp, "select cpu, ts, dur, utid, end_state from sched order by cpu, ts")
    got = [(cpu, ts, None if dur == -1 else ts + dur, tids[utid], st) for cpu, ts, dur, utid, st in rows]
    assert got == SCHED


def test_thread_states(converted):
    _, _, _, _, tp = converted
    tids = tid_of(tp)
    for tid, want in STATES.items():
        rows = q(tp, f"""select ts, dur, state, waker_utid from thread_state
                         join thread using (utid) where tid = {tid} and ts >= {want[0][0]} order by ts""")
        got = [(ts, None if dur == -1 else ts + dur, st, tids.get(w)) for ts, dur, st, w in rows]
        assert got == want, tid


def test_thread_names(converted):
    fmt, _, _, _, tp = converted
    rows = q(tp, "select tid, name from thread where tid != 0")
    names = {}
    for tid, name in rows:
        assert tid not in names, f"tid {tid} appears twice"
        names[tid] = name
    for tid, want in NAMES.items():
        if tid == O and "json" in fmt:  # the systrace text parser splits names at spaces
            want = want.replace(" ", "_")
        assert names.get(tid) == want, tid
    # the "outside" pseudo thread belongs to no process: the UI groups it alone, after every process
    assert q(tp, f"select count(*) from thread where tid = {O} and upid is null") == [(1,)]


def test_chrome_metadata(converted):
    name, out, *_ = converted
    if "json" not in name:
        pytest.skip("Chrome JSON only")
    opener = gzip.open if name.endswith(".gz") else open
    with opener(out, "rb") as f:
        doc = orjson.loads(f.read())
    meta = doc["metadata"]["timeline"]
    assert meta["drops"] == {"sched": 3, "proc": 1}
    assert meta["drops_per_cpu"] == {"sched": [3, 0], "proc": [0, 1]}
    assert meta["finalized"] is True
    m = {(e["name"], e["tid"]): e["args"] for e in doc["traceEvents"] if e["ph"] == "M"}
    assert m[("thread_name", 1001)] == {"name": "loader0"}
    assert m[("process_name", 1100)] == {"name": "nvidia-smi"}
    assert m[("process_labels", 1000)] == {"labels": "python3 train.py --epochs 2"}
    # order for viewers that read Chrome's sort indexes: the recorded command, then its child
    assert m[("process_sort_index", 1000)] == {"sort_index": 0}
    assert m[("process_sort_index", 1100)] == {"sort_index": 1}
    assert m[("thread_sort_index", 1000)] == {"sort_index": -1}  # the main thread first
    assert m[("thread_sort_index", 1001)] == {"sort_index": 1001}
    lines = doc["systemTraceEvents"].splitlines()
    assert sum("sched_switch:" in ln for ln in lines) == len(SCHED)
    assert sum("sched_waking:" in ln for ln in lines) == 5  # the untracked woken one is dropped


# ------------------------------------------------------------------ protobuf only

@pytest.fixture(scope="module")
def pf(raw, tmp_path_factory, open_trace):
    out, res, _ = _convert(raw, tmp_path_factory, "x.pftrace", fmt="perfetto")
    with open_trace(out) as tp:
        yield res, tp


def test_pf_processes(pf):
    _, tp = pf
    rows = q(tp, """select p.pid, pp.pid, p.name, p.cmdline, p.start_ts, p.end_ts
                    from process p left join process pp on p.parent_upid = pp.upid where p.pid != 0""")
    by_pid = {}
    for r in rows:
        assert r[0] not in by_pid, f"pid {r[0]} appears twice"
        by_pid[r[0]] = r[1:]
    assert by_pid[1000] == (999, "python3", "python3 train.py --epochs 2", T(10), None)
    # ends 1 ns after its final switch-out (prev_state Z at T(301)), not at the exit tracepoint:
    # freed at that switch's very time, trace_processor may take the switch after the free
    assert by_pid[1100] == (1000, "/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi -L", T(200), T(301) + 1)
    threads = {r[0]: r[1:] for r in q(tp, """select tid, pid, thread.start_ts, thread.end_ts
                                             from thread join process using (upid)""")}
    assert threads[1001] == (1000, T(30), None)
    # threads end just after their final switch-out (prev_state X/Z), after the exit tracepoint
    assert threads[1002] == (1000, T(31), T(405) + 1)
    assert threads[1100] == (1100, T(200), T(301) + 1)


def test_pf_drops_and_stats(pf):
    _, tp = pf
    st = {(n, i): v for n, i, v in q(tp, "select name, idx, value from stats where value != 0")}
    assert st[("ftrace_cpu_overrun_end", 0)] == 3
    assert st[("ftrace_cpu_overrun_end", 1)] == 1
    assert st[("ftrace_cpu_dropped_events_delta", 0)] == 3
    # only the leading synthetic switch of each CPU is skipped, no real one
    assert st[("compact_sched_switch_skipped", None)] == 2
    assert not [k for k in st if "error" in k[0] or "invalid" in k[0] or "mismatch" in k[0]]
    counters = dict(q(tp, """select t.name, max(c.value) from counter c
                             join counter_track t on t.id = c.track_id group by t.name"""))
    assert counters == {"timeline: sched records dropped": 3, "timeline: proc records dropped": 1}


def test_drops_refused_by_the_kernel_are_told_apart(tmp_path, open_trace):
    """Overrun stats count a full ring only; a refusal gets its own counter track and metadata."""
    b = LogBuilder(ncpu=2)
    b.switch(T(10), 0, 0, 2000, prev_tracked=False)
    b.switch(T(20), 1, 0, 2001, prev_tracked=False)
    ring = 1 << 20

    def causes(full, refused, pending):
        return {"full": full, "refused": refused, "retried": [0, 4], "refused_max_pending": pending,
                "ring_bytes": ring}

    end = end_block(drops_sched=[5, 2], drops_proc=[0, 1], stop_ts=T(30),
                    drop_causes={"sched": causes([4, 0], [1, 2], 4096), "proc": causes([0, 1], [0, 0], 0)})
    raw = b.write(tmp_path / "r.tlraw", end)
    convert(raw, str(tmp_path / "r.pftrace"))
    with open_trace(tmp_path / "r.pftrace") as tp:
        st = {(n, i): v for n, i, v in q(tp, "select name, idx, value from stats where value != 0")}
        assert (st[("ftrace_cpu_dropped_events_delta", 0)], st[("ftrace_cpu_dropped_events_delta", 1)]) == (5, 3)
        assert (st[("ftrace_cpu_overrun_end", 0)], st[("ftrace_cpu_overrun_end", 1)]) == (4, 1)
        counters = dict(q(tp, """select t.name, max(c.value) from counter c
                                 join counter_track t on t.id = c.track_id group by t.name"""))
        assert counters == {"timeline: sched records dropped": 7, "timeline: proc records dropped": 1,
                            "timeline: sched records refused by the kernel (ring not full)": 3}
    res = convert(raw, str(tmp_path / "r.json"))
    assert res.drops == {"sched": 7, "proc": 1}
    with open(res.out_path, "rb") as f:
        meta = orjson.loads(f.read())["metadata"]["timeline"]
    assert meta["drop_causes"]["sched"]["refused"] == [1, 2]


def test_pf_system_info_and_events(pf):
    _, tp = pf
    md = dict(q(tp, "select name, coalesce(str_value, cast(int_value as text)) from metadata"))
    assert md["system_release"] == "6.8.0-45-generic"
    assert md["system_machine"] == "x86_64"
    names = dict(q(tp, "select name, count(*) from ftrace_event group by name"))
    assert names["task_newtask"] == 4
    assert names["task_rename"] == 5  # 3 renames + 2 execs
    assert names["sched_process_exec"] == 2
    assert names["sched_process_free"] == 2
    # the names over time stay queryable in the rename events' args
    renames = q(tp, """select e.ts, a.display_value from ftrace_event e join thread using (utid)
                       join args a using (arg_set_id)
                       where e.name = 'task_rename' and a.key = 'newcomm' and tid = 1001 order by e.ts""")
    assert renames == [(T(40), "pt_data"), (T(45), "loader0")]


# ------------------------------------------------------------------ damage, errors

def _chop_inside_block(path, index_from_end):
    with RawLogReader(path) as rd:
        offs = [b.offset for b in rd.blocks()]
    cut = offs[-index_from_end] + 24 + 10
    with open(path, "r+b") as f:
        f.truncate(cut)
    return cut


@pytest.mark.parametrize("name", ["t.pftrace", "t.json"])
def test_truncated_log(tmp_path, name, open_trace):
    raw = scenario(tmp_path / "cut.tlraw", end=False)
    _chop_inside_block(raw, 2)  # inside the last sched block; the proc block after it is gone too
    res = convert(raw, str(tmp_path / name))
    assert res.damage is not None and "truncated" in res.damage.reason
    assert not res.finalized and res.drops == {}
    assert res.events == N_RECORDS - 7 - 1
    with open_trace(tmp_path / name) as tp:
        tids = tid_of(tp)
        rows = q(tp, "select cpu, ts, utid from sched order by cpu, ts")
        assert max(ts for _, ts, _ in rows) == T(301)
        assert (1, T(206), 1100) in [(c, ts, tids[u]) for c, ts, u in rows]
        assert q(tp, "select count(*) from stats where name like 'ftrace_cpu_overrun%' and value > 0") == [(0,)]


def test_not_a_raw_log(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_bytes(b"hello, this is not a raw log\n" * 10)
    with pytest.raises(RawLogError):
        convert(str(bad), str(tmp_path / "x.pftrace"))
    with pytest.raises(RawLogError):
        convert(str(tmp_path / "missing.tlraw"), str(tmp_path / "y.json"))
    assert not os.path.exists(tmp_path / "x.pftrace")
    assert not os.path.exists(tmp_path / "y.json")
    assert os.listdir(tmp_path) == ["notes.txt"]


def test_mode_0600_overwrites_existing(tmp_path, raw):
    out = tmp_path / "old.pftrace"
    out.write_bytes(b"old")
    os.chmod(out, 0o644)
    old = os.umask(0)
    try:
        convert(raw, str(out), fmt="perfetto")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert out.read_bytes()[:1] == b"\x0a"


def test_format_choice(tmp_path, raw):
    assert format_for("a.json") == format_for("a.JSON.gz") == "chrome"
    assert format_for("a.pftrace") == format_for("a.perfetto-trace") == "perfetto"
    with pytest.raises(ValueError):
        convert(raw, str(tmp_path / "a.x"), fmt="systrace")
    res = convert(raw, str(tmp_path / "a.json.gz"), fmt="chrome")
    with gzip.open(res.out_path) as f:
        assert orjson.loads(f.read())["metadata"]["timeline"]["drops"]["sched"] == 3


# ------------------------------------------------------------------ edge cases

def test_chain_break_and_attach(tmp_path, open_trace):
    """Attach mode: names from the procs snapshot; a lost switch is bridged."""
    b = LogBuilder(ncpu=1, mode="attach", target_pid=2000)
    b.procs(T(1), [{"pid": 2000, "ppid": 1, "comm": "trainer", "cmdline": ["python", "-m", "trainer"],
                    "threads": [{"tid": 2000, "comm": "trainer"}, {"tid": 2001, "comm": "pin_mem"}]}])
    b.switch(T(10), 0, 2000, 0, prev_state=1, next_tracked=False)
    b.switch(T(20), 0, 0, 2001, prev_tracked=False)
    # lost: 2001 -> other at T(30), other -> 2000 at T(40)
    b.switch(T(50), 0, 2000, 0, prev_state=2, next_tracked=False)
    b.switch(T(60), 0, 0, 2002, prev_tracked=False)  # tracked tid never named
    raw = b.write(tmp_path / "a.tlraw", end_block(drops_sched=[2], drops_proc=[0], stop_ts=T(70)))
    for name in ("a.pftrace", "a.json"):
        res = convert(raw, str(tmp_path / name))
        assert res.synthetic_switches == (2 if name.endswith("pftrace") else 1)
        with open_trace(tmp_path / name) as tp:
            tids = tid_of(tp)
            rows = [(ts, None if d == -1 else ts + d, tids[u], s)
                    for ts, d, u, s in q(tp, "select ts, dur, utid, end_state from sched order by ts")]
            assert rows == [(T(10), T(20), 0, "R"), (T(20), T(50), 2001, "R"), (T(50), T(50), 2000, "D"),
                            (T(50), T(60), 0, "R"), (T(60), None, 2002, None)]
            names = dict(q(tp, "select tid, name from thread"))
            assert names[2000] == "trainer" and names[2001] == "pin_mem"
            if name.endswith("pftrace"):
                assert q(tp, "select pid, cmdline from process where pid = 2000") == [(2000, "python -m trainer")]
                assert q(tp, "select p.pid from thread join process p using (upid) where tid = 2001") == [(2000,)]


def test_wakings_before_a_cpus_first_switch_are_kept(tmp_path, open_trace):
    """trace_processor skips compact wakings before a CPU's first switch, so the
    protobuf leads with a synthetic switch at the first waking instead."""
    b = LogBuilder(ncpu=2, mode="attach", target_pid=2000)
    b.procs(T(1), [{"pid": 2000, "ppid": 1, "comm": "trainer", "cmdline": ["python"],
                    "threads": [{"tid": 2000, "comm": "trainer"}, {"tid": 2001, "comm": "loader"}]}])
    b.switch(T(5), 0, 0, 2000, prev_tracked=False)
    b.waking(T(10), 1, 2000, 2001, target_cpu=1)  # CPU 1's first event: a waking
    b.switch(T(30), 1, 0, 2001, prev_tracked=False)
    b.switch(T(40), 1, 2001, 0, prev_state=1, next_tracked=False)
    raw = b.write(tmp_path / "w.tlraw", end_block(drops_sched=[0, 0], drops_proc=[0, 0], stop_ts=T(50)))
    for name in ("w.pftrace", "w.json"):
        convert(raw, str(tmp_path / name))
        with open_trace(tmp_path / name) as tp:
            states = q(tp, """select ts, dur, state from thread_state join thread using (utid)
                              where tid = 2001 order by ts""")
            assert states[:2] == [(T(10), T(30) - T(10), "R"), (T(30), T(40) - T(30), "Running")], (name, states)
            if name.endswith("pftrace"):
                assert q(tp, "select value from stats where name = 'compact_sched_waking_skipped'") == [(0,)]


def test_packed_varints_match_protobuf():
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    rng = np.random.default_rng(0)
    vals = np.concatenate([rng.integers(0, 1 << 62, 200), rng.integers(-(1 << 40), 0, 50),
                           [0, 1, 127, 128, 16383, 16384, (1 << 63) - 1, -1]]).astype(np.int64)
    m = pb.FtraceEventBundle.CompactSched()
    m.switch_prev_state.extend(vals.tolist())
    want = m.SerializeToString()
    body = packed_varints(vals)
    assert want.endswith(body) and want[0] == 0x12


def test_state_strings():
    assert [state_str(v) for v in (0, 1, 2, 0x100, 0x10, 0x20, 0x80, 0x3)] == \
        ["R", "S", "D", "R+", "X", "Z", "I", "S|D"]


def test_event_dtypes_unchanged():
    # the converters index these fields by name; fail loudly if the layout moves
    assert set(sched_records.SCHED_EVENT.names) >= {"ts", "tid", "target_tid", "arg", "prio", "cpu", "kind", "flags"}
    assert set(proc_records.PROC_EVENT.names) >= {"child_tid", "child_tgid", "exit_code", "comm", "old_comm", "data"}


def test_both_writers_offer_the_trace_writer_interface(tmp_path):
    """The conversion loop talks to writers through one Protocol (issue 10)."""
    import io
    from timeline.converters.chrome.writer import ChromeJsonWriter
    from timeline.converters.interface import TraceWriter
    from timeline.converters.model import scan
    from timeline.converters.perfetto.writer import PerfettoWriter
    from rawlog_factory import scenario
    m = scan(scenario(tmp_path / "a.tlraw"))
    for cls in (PerfettoWriter, ChromeJsonWriter):
        w = cls(io.BytesIO(), m)
        assert isinstance(w, TraceWriter), cls
    assert not isinstance(object(), TraceWriter)
