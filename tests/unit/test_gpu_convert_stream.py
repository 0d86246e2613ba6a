"""The gpu family writes its work as pass 2 reads it (bounded memory, issue 23): the trace must not
depend on when it writes.  One synthetic raw log (tests/unit/test_gpu_convert.py's, every kind of
record, overlapping kernels on one stream) converted with the converter releasing work every few
rows must give the same slices, tracks, args, flows and counters as when it holds everything to the
end: in blocks of 3 records in time order (a release at almost every block), in reverse order
(CUPTI's buffers come out of order: nothing can go before the last block) and in one block; and
with busy % binned at the end from kept intervals (a hostile log's GPUs past BINNED_DEVICES).
"""
from __future__ import annotations

import pytest

from test_gpu_convert import full_log, us
from timeline.converters import convert
from timeline.gpu import converter as gpu_converter
from timeline.gpu import records as R
from timeline.trace_processor import open_trace

# Content only (row ids and track uuids depend on the order of writing): each slice with its track's
# name, parent and first slice (which tells lanes of one name apart), its thread's and process's
# names (not ids: Chrome JSON numbers a pseudo thread per GPU stream as it first writes it), its
# args (but a trace set's timeline_span_id, numbered in the order cut slices are written); each flow
# by its ends.
QUERIES = {
    "slices": """select s.ts, s.dur, s.name, s.category, s.depth, t.name, p.name,
                        (select min(x.ts) || ':' || count(*) from slice x where x.track_id = s.track_id),
                        th.name, pr.name, (select group_concat(k, ';') from (select a.key || '=' || coalesce(a.display_value, '')
                                 as k from args a where a.arg_set_id = s.arg_set_id
                                 and a.key not glob '*timeline_span_id' order by a.key))
                 from slice s join track t on t.id = s.track_id left join track p on p.id = t.parent_id
                 left join thread_track tt on tt.id = s.track_id left join thread th using (utid)
                 left join process pr on pr.upid = th.upid""",
    "flows": """select o.ts, o.name, o.category, i.ts, i.name, i.category from flow f
                join slice o on o.id = f.slice_out join slice i on i.id = f.slice_in""",
    "counters": """select t.name, p.name, c.ts, c.value from counter c join track t on t.id = c.track_id
                   left join track p on p.id = t.parent_id""",
    "tracks": "select t.name, p.name, count(*) from track t left join track p on p.id = t.parent_id group by 1, 2",
    "threads": "select t.name, p.name, p.pid from thread t left join process p using (upid)",
}


def trace_rows(path: str) -> dict:
    """Each query's rows, sorted: what two traces of one recording must share."""
    with open_trace(path, engine="wasm") as tp:
        return {k: sorted(tp.query(q).rows, key=repr) for k, q in QUERIES.items()}


def busy_log():
    """full_log, plus a second burst of overlapping work on GPU 0 stream 7 and a copy: lanes
    that carry over from one release to the next, busy time across releases."""
    g = full_log()
    k = g.string(30, "later_kernel")
    for i in range(12):
        t = 11_000 + 300 * i
        g.launch("cudaLaunchKernel", us(t), 10_000, [(k, us(t + 20), us(t + 900)), (k, us(t + 40), us(t + 500))])
    g.launch("cudaMemcpyAsync", us(15_000), 20_000, [({"kind": R.MEMCPY, "bytes": 4_000_000, "copy_kind": 1},
                                                      us(15_050), us(16_050))], cbid=41)
    return g


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    d = tmp_path_factory.mktemp("stream")
    g = busy_log()
    return {"small": g.write(d / "small.tlraw", block=3, reverse=False), "late": g.write(d / "late.tlraw", block=3),
            "one": g.write(d / "one.tlraw", block=10_000)}


@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_released_in_pieces_same_trace(raw, tmp_path, monkeypatch, fmt):
    ext = ".pftrace" if fmt == "perfetto" else ".json"
    whole = str(tmp_path / ("whole" + ext))
    convert(raw["small"], whole)
    monkeypatch.setattr(gpu_converter, "RELEASE_ROWS", 2)
    released = [str(tmp_path / (f"{k}-pieces" + ext)) for k in ("small", "late", "one")]
    for k, out in zip(("small", "late", "one"), released):
        convert(raw[k], out)
    # busy % kept as intervals to the end (GPUs past BINNED_DEVICES) comes out the same too
    monkeypatch.setattr(gpu_converter, "BINNED_DEVICES", 0)
    released.append(str(tmp_path / ("unbinned" + ext)))
    convert(raw["small"], released[-1])
    want = trace_rows(whole)
    assert len(want["slices"]) > 40 and want["flows"] and want["counters"]
    # the overlapping burst needs more lanes than full_log's graph launch (2)
    if fmt == "perfetto":  # (Chrome JSON: a pseudo thread per lane)
        lanes = {(t, p): n for t, p, n in want["tracks"]}
        assert lanes[("GPU 0 \u00b7 stream 7", "GPU 0")] > 2, want["tracks"]
    for out in released:
        got = trace_rows(out)
        for k in QUERIES:
            assert got[k] == want[k], (out, k)


def test_watermark_holds_back_late_blocks(raw, monkeypatch):
    """Blocks in reverse time order: nothing can be written before the last block (its work starts
    earliest), so the converter holds every row until then (here: until finish(), the last block
    coming before the held rows had doubled)."""
    from timeline.converters import families, model as _model
    from timeline.converters.model import ItemKind

    monkeypatch.setattr(gpu_converter, "RELEASE_ROWS", 2)
    m = _model.scan(raw["late"], None, 0, families_loader=families.load)
    gpu = next(f for f in m.families if isinstance(f, gpu_converter.GpuConverter))
    written = []

    class Sink:
        def __getattr__(self, name):
            return lambda *a, **k: written.append(name)

    norm = _model.SchedNormalizer(m, leading=True)
    held, slices = [], []
    for item in _model.stream(m, norm):
        if item.kind is ItemKind.RING and item.ring == R.RING_GPU:
            gpu.emit_ring(Sink(), item.ring, item.recs)
            held.append(gpu._pending_n)
            slices.append(written.count("group_slices"))
    assert held[-2] > 30 and slices[-2] == 0
    gpu.finish(Sink())
    assert gpu._pending_n == 0 and written.count("group_slices") > 0
