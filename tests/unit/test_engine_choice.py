"""Picking the wasm build by need: memory64 only when a trace is estimated not
to fit wasm32's 4 GiB, and a wasm32 engine that runs out of memory anyway is
replaced by a memory64 one (loading, or in the checks), with the same findings.

The out-of-memory case is forced with TIMELINE_WASM32_HEAP_MAX (tests only): a
heap cap that lets the engine start but not load the trace, which carries a
32 MiB string so the margin is wide on both sides."""
from __future__ import annotations

import os
import sys

import pytest

from test_query_check import Events, cuda_trace
from timeline.checks.report import to_json
from timeline.checks.runner import check_trace, run_checks
from timeline.trace_processor import EngineOutOfMemory, TraceProcessorConfig, sizing, wasm_engine

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import check_speed  # noqa: E402  (the benchmark's trace builders)

CAP = 52 << 20  # the engine starts with ~46 MiB; the padded trace needs ~100 MiB


@pytest.fixture(scope="module")
def padded(tmp_path_factory):
    d = tmp_path_factory.mktemp("oom")
    path = cuda_trace(d / "t", bad=True)
    ev = Events()
    pad = ev.track("padding")
    ev.slice(pad, check_speed.BOOT0 + 10, 1000, "padding", "padding", blob="x" * (32 << 20))
    with open(path, "ab") as f:
        f.write(ev.data())
    return path


def findings(report) -> dict:
    return {c["id"]: (c["status"], c["findings"]) for c in to_json(report)["checks"]}


def test_wasm32_out_of_memory_loads_again_into_memory64(padded, monkeypatch, capfd):
    with wasm_engine.open_wasm(padded) as tp:
        assert not tp.memory64  # a 33 MB trace fits wasm32 by the estimate
        want = findings(run_checks(tp, padded))
    monkeypatch.setenv(wasm_engine.WASM32_HEAP_ENV, str(CAP))
    with pytest.raises(EngineOutOfMemory):
        wasm_engine.WasmTraceProcessor(memory64=False).loaded(padded)
    capfd.readouterr()
    config = TraceProcessorConfig(engine="wasm")
    engines = []

    def load(memory64):
        tp = TraceProcessorConfig(engine="wasm", wasm_memory64=memory64).load(padded) if memory64 \
            else config.load(padded)
        engines.append(tp.memory64)
        return tp

    got = findings(check_trace(load, padded))
    err = capfd.readouterr().err.strip().splitlines()
    assert engines == [True]  # the retry was inside load(None): one engine handed out
    assert len(err) == 1 and "ran out of memory" in err[0] and "memory64" in err[0]
    assert got == want
    assert any(s in ("error", "warning") for s, _ in got.values())  # findings to compare, not all quiet


def test_out_of_memory_in_the_checks_runs_them_again_on_memory64(padded, monkeypatch, capfd):
    """A wasm32 engine that loaded but crashed for memory in a query."""
    with wasm_engine.open_wasm(padded) as tp:
        want = findings(run_checks(tp, padded))
    calls = []

    def load(memory64):
        calls.append(memory64)
        tp = wasm_engine.open_wasm(padded, memory64=bool(memory64))
        if memory64 is None:  # its first query crashes as an exhausted engine does
            def crash(sql):
                tp.out_of_memory = True
                raise EngineOutOfMemory("wasm trace_processor crashed: PERFETTO_CHECK(res) (Out of memory)")
            tp.query = crash
        return tp

    got = findings(check_trace(load, padded))
    assert calls == [None, True]
    assert got == want
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "in the checks" in err[0]


def _loaded_bytes(path) -> int:
    with wasm_engine.open_wasm(path, memory64=False) as tp:
        return tp._mem.data_len(tp._store)


def test_estimate_follows_content_not_bytes(tmp_path):
    """Sched bundles weigh ~4x more per file byte than track events: the
    estimate must see that (a bytes-only rule misjudges one of them)."""
    from timeline.converters import convert

    raw, sched = str(tmp_path / "s.tlraw"), str(tmp_path / "s.pftrace")
    check_speed.sched_log(raw, 40_000)
    convert(raw, sched, fmt="perfetto")
    cuda = str(tmp_path / "c.pftrace")
    with open(cuda, "wb") as f:
        f.write(check_speed.cuda_packets(20_000)[0])
    per_byte = {}
    for name, path in (("sched", sched), ("cuda", cuda)):
        fd = os.open(path, os.O_RDONLY)
        try:
            est = sizing.estimate_engine_bytes(fd) / sizing.QUERY_HEADROOM
        finally:
            os.close(fd)
        actual = _loaded_bytes(path)
        assert 0.6 * actual < est < 1.6 * actual, (name, est, actual)
        per_byte[name] = (est - sizing.ENGINE_BASE) / os.path.getsize(path)
    assert per_byte["sched"] > 3 * per_byte["cuda"]


def test_memory64_chosen_when_the_estimate_passes_the_cap(tmp_path):
    path = tmp_path / "c.pftrace"
    path.write_bytes(check_speed.cuda_packets(2000)[0])
    fd = os.open(path, os.O_RDONLY)
    try:
        need = sizing.estimate_engine_bytes(fd)
        assert sizing.needs_memory64(fd, need - 1)
        assert not sizing.needs_memory64(fd, need + 1)
        assert not sizing.needs_memory64(fd, wasm_engine.WASM32_HEAP_MAX)
    finally:
        os.close(fd)
