"""Trace sets (converters/trace_set.py): a raw log split in time into complete Perfetto traces.

The reference is the same log converted unsplit: after rejoining the pieces of
cut slices by timeline_span_id, the chunks together hold the same slices
(thread, track, name, start, duration) and each thread the same running time.
"""
from __future__ import annotations

import json
import os
from collections import Counter, defaultdict

import pytest

from timeline.converters import convert
from timeline.converters.trace_set import SplitSpec, chunk_at, main_chunk, parse_split, read_index
from timeline.errors import UserError
from timeline.trace_processor import open_trace
from rawlog_factory import many_switches, scenario
import trace_set_paint
from trace_set_paint import STEP

painted = trace_set_paint.painted  # a fixture

def _slices(tp) -> list[tuple]:
    return tp.query(
        "select s.ts, s.dur, s.name, coalesce('thread ' || t.tid, tr.name) track, "
        "extract_arg(s.arg_set_id, 'debug.timeline_cut') cut, extract_arg(s.arg_set_id, 'debug.timeline_span_id') sid "
        "from slice s join track tr on s.track_id = tr.id left join thread_track tt on tt.id = s.track_id "
        "left join thread t using (utid) "
        "where extract_arg(s.arg_set_id, 'debug.timeline_flow_id') is null").rows  # not the flow edge markers


def _running(tp) -> dict:
    return dict(tp.query("select t.tid, sum(s.dur) from sched s join thread t using (utid) "
                         "where t.tid != 0 and s.dur > 0 group by t.tid").rows)


def _split(tmp_path, spec=SplitSpec(duration_ns=STEP)):
    raw = scenario(tmp_path / "s.tlraw")
    whole = convert(raw, str(tmp_path / "s.pftrace"))
    res = convert(raw, str(tmp_path / "s.pftrace"), split=spec)
    return whole, res


@pytest.mark.usefixtures("painted")
def test_chunks_rejoin_to_the_unsplit_trace(tmp_path):
    whole, res = _split(tmp_path)
    assert res.out_path == str(tmp_path / "s.tlset") and len(res.chunks) == 5
    with open_trace(whole.out_path) as tp:
        ref, ref_run = _slices(tp), _running(tp)
    pieces, running = [], Counter()
    for c in res.chunks:
        with open_trace(os.path.join(res.out_path, c["file"])) as tp:
            rows = _slices(tp)
            lo = c["start_ns"] if c is not res.chunks[0] else 0  # the first/last chunk: whatever lies before/after
            hi = c["end_ns"] if c is not res.chunks[-1] else 1 << 62
            assert [r for r in rows if not lo <= r[0] <= r[0] + r[1] <= hi] == []
            pieces += rows
            running.update(_running(tp))
            # every process and thread alive in the chunk is named in it
            names = dict(tp.query("select tid, name from thread where tid in (1000, 1001)").rows)
            assert names == {1000: "python3", 1001: "loader0"}
            assert tp.query("select name from process where pid = 1000").rows == [("python3",)]
    assert dict(running) == ref_run  # each thread's running time, whatever the boundaries cut
    by_span = defaultdict(list)
    joined = []
    for row in pieces:
        (by_span[row[5]] if row[5] is not None else joined).append(row)
    assert len(by_span) >= 5  # the painted slices do cross boundaries
    for sid, parts in by_span.items():
        parts.sort()
        assert [p[4] for p in parts] == ["end"] + ["both"] * (len(parts) - 2) + ["start"]
        for a, b in zip(parts, parts[1:]):
            assert a[0] + a[1] == b[0] and (b[0] - res.chunks[0]["start_ns"]) % STEP == 0  # cut at a boundary
        joined.append((parts[0][0], parts[-1][0] + parts[-1][1] - parts[0][0], *parts[0][2:4], None, None))
    key = lambda r: r[:4]  # noqa: E731
    assert sorted(map(key, joined)) == sorted(map(key, ref))


@pytest.mark.usefixtures("painted")
def test_counters_flows_and_tracks_in_every_chunk(tmp_path):
    _, res = _split(tmp_path)
    expect_queue = [None, 2, 2, 2, 3]  # the value held at each chunk's start (none before the first sample)
    for i, c in enumerate(res.chunks):
        with open_trace(os.path.join(res.out_path, c["file"])) as tp:
            q = tp.query("select c.ts, c.value from counter c join counter_track t on c.track_id = t.id "
                         "where t.name = 'queue' order by c.ts").rows
            at_start = [v for ts, v in q if ts == c["start_ns"]]
            assert at_start == ([] if expect_queue[i] is None else [expect_queue[i]])
            tracks = {r[0] for r in tp.query("select name from track").rows}
            # track groups and their tracks are declared even where empty (trace_processor keeps
            # no empty top-level track, so "memcpy" shows only where it has slices)
            assert {"GPU 0", "stream 7", "memory"} <= tracks
            flows = tp.query("select count(*) from flow").rows[0][0]
            if i == 0:
                assert flows >= 1  # a flow with both ends in the first chunk is kept


@pytest.mark.usefixtures("painted")
def test_index_describes_the_chunks(tmp_path):
    whole, res = _split(tmp_path)
    idx = read_index(res.out_path)
    assert idx["format"] == "timeline-trace-set" and idx["version"] == 1 and idx["source"] == "s.tlraw"
    chunks = idx["chunks"]
    assert chunks == res.chunks
    assert sorted(os.listdir(res.out_path)) == sorted([c["file"] for c in chunks] + ["index.json"])
    for a, b in zip(chunks, chunks[1:]):
        assert a["end_ns"] == b["start_ns"] and b["start_ns"] - a["start_ns"] == STEP
    for c in chunks:
        assert set(c) >= {"file", "start_ns", "end_ns", "bytes", "events", "families", "machine", "rank"}
        assert c["bytes"] == os.path.getsize(os.path.join(res.out_path, c["file"]))
        assert c["machine"] == "testhost" and c["rank"] is None and c["events"] > 0
    assert "sched" in chunks[0]["families"] and "proc" in chunks[0]["families"]
    assert sum(c["switches"] for c in chunks) >= whole.switches  # plus the carried-over switches


def test_split_by_events_gives_even_chunks(tmp_path):
    raw = many_switches(tmp_path / "m.tlraw", 120_000, block=5000)
    res = convert(raw, str(tmp_path / "m.pftrace"), split=parse_split("30kev"))
    sw = [c["switches"] for c in res.chunks]
    assert len(sw) == 4 and all(20_000 < n < 40_000 for n in sw), sw
    with open_trace(os.path.join(res.out_path, res.chunks[2]["file"])) as tp:
        assert tp.query("select count(*) from sched").rows[0][0] > 20_000


def test_auto_split_only_above_the_threshold(tmp_path, monkeypatch):
    from timeline.converters import trace_set

    raw = many_switches(tmp_path / "m.tlraw", 20_000, block=5000)
    assert convert(raw, str(tmp_path / "m.pftrace"), split=trace_set.AUTO).chunks is None
    monkeypatch.setattr(trace_set, "AUTO_SPLIT_ABOVE", 10_000)
    res = convert(raw, str(tmp_path / "m.pftrace"), split=trace_set.SplitSpec(events=8_000, auto=True))
    assert res.out_path.endswith("m.tlset") and len(res.chunks) == 3


def test_parse_split():
    assert parse_split("5m") == SplitSpec(duration_ns=300 * 10**9)
    assert parse_split("1.5h").duration_ns == 5400 * 10**9
    assert parse_split("2000000ev") == parse_split("2Mev") == SplitSpec(events=2_000_000)
    assert parse_split("off") is None and parse_split("auto").auto
    for bad in ("5x", "10ev", "0.1ms", ""):
        with pytest.raises(ValueError):
            parse_split(bad)


def test_view_picks_the_chunk(tmp_path, capsys):
    from timeline.commands.view import pick_chunk

    _, res = _split(tmp_path)
    idx = read_index(res.out_path)
    assert chunk_at(idx, 0) == 0 and chunk_at(idx, 0.00045) == 2 and chunk_at(idx, 99) == 4
    path = pick_chunk(res.out_path, 0.00045)
    assert path == os.path.join(res.out_path, "chunk-0003.pftrace")
    err = capsys.readouterr().err
    assert "chunk 3 of 5" in err and "chunk-0002.pftrace" in err and "chunk-0004.pftrace" in err
    for c, n in zip(idx["chunks"], (1, 0, 10, 30, 20)):  # a CUDA marker in the first, the work from the third
        c["family_events"] = {"sched": 100, "cuda": n}
    assert main_chunk(idx) == 3  # the first with at least half of the busiest chunk's CUDA calls
    for c, n in zip(idx["chunks"], (3, 9, 10, 2, 1)):
        c["family_events"], c["events"] = {"sched": n}, n
    assert main_chunk(idx) == 1  # without GPU work: by all events


def test_an_existing_set_is_replaced_other_directories_are_not(tmp_path):
    raw = scenario(tmp_path / "s.tlraw")
    spec = SplitSpec(duration_ns=STEP)
    convert(raw, str(tmp_path / "s.pftrace"), split=spec)
    res = convert(raw, str(tmp_path / "s.pftrace"), split=SplitSpec(duration_ns=2 * STEP))
    assert len(os.listdir(res.out_path)) == 3 + 1  # the five chunks before are gone
    (tmp_path / "other.tlset").mkdir()
    (tmp_path / "other.tlset" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not a trace set"):
        convert(raw, str(tmp_path / "other.tlset"), split=spec)
    assert (tmp_path / "other.tlset" / "notes.txt").read_text() == "mine"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tl-")]  # no temporary left behind


def test_a_malformed_index_is_one_line(tmp_path):
    d = tmp_path / "x.tlset"
    d.mkdir()
    (d / "index.json").write_text(json.dumps({"format": "timeline-trace-set", "chunks": [{"file": "../etc"}]}))
    with pytest.raises(UserError, match="malformed"):
        read_index(str(d))


FLOW_ENDS = ("select s.name, s.ts, s.dur, coalesce('thread ' || t.tid, tr.name) track, "
             "extract_arg(s.arg_set_id, 'debug.timeline_flow_id') fid, "
             "extract_arg(s.arg_set_id, 'debug.timeline_flow_chunk') other, "
             "(select count(*) from flow f where f.slice_out = s.id or f.slice_in = s.id) flows "
             "from slice s join track tr on s.track_id = tr.id left join thread_track tt on tt.id = s.track_id "
             "left join thread t using (utid) where s.name in ('cudaLaunchKernel', 'late kernel') "
             "or s.name like '% flow %' order by s.ts")


@pytest.mark.usefixtures("painted")
def test_a_flow_across_a_boundary_is_marked_in_both_chunks(tmp_path):
    """A launch at the end of chunk 1 whose kernel runs in chunk 2: each chunk draws the flow from/to a
    marker at its edge, on the track of the end it lacks, naming the other chunk and the flow id."""
    whole, res = _split(tmp_path)
    with open_trace(whole.out_path) as tp:
        ref = tp.query("select count(*) from flow f join slice s on f.slice_in = s.id "
                       "where s.name = 'late kernel'").rows[0][0]
    assert ref == 1
    edge = res.chunks[1]["start_ns"]
    fid = trace_set_paint.ACROSS
    with open_trace(os.path.join(res.out_path, "chunk-0001.pftrace")) as tp:
        rows = tp.query(FLOW_ENDS).rows
        assert rows == [("cudaLaunchKernel", edge - 3000, 1000, "thread 1002", None, None, 1),
                        ("\u2192 flow to chunk-0002.pftrace", edge - 1, 0, "stream 9", fid, "chunk-0002.pftrace", 1)]
        assert tp.query("select count(*) from flow f join slice a on f.slice_out = a.id join slice b "
                        "on f.slice_in = b.id where a.name = 'cudaLaunchKernel' and b.name like '%flow to%'"
                        ).rows[0][0] == 1
    with open_trace(os.path.join(res.out_path, "chunk-0002.pftrace")) as tp:
        rows = tp.query(FLOW_ENDS).rows
        assert rows == [("\u2190 flow from chunk-0001.pftrace", edge, 0, "thread 1002", fid, "chunk-0001.pftrace", 1),
                        ("late kernel", edge + 5000, 2000, "stream 9", None, None, 1)]
    for c in res.chunks[2:]:  # nothing elsewhere
        with open_trace(os.path.join(res.out_path, c["file"])) as tp:
            assert tp.query(FLOW_ENDS).rows == []
