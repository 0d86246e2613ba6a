"""`timeline merge --split`: two machines' trace sets merged as one trace set, window by window
(converters/merge_set.py, docs/trace-sets.md)."""
from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from helpers import timeline_cmd
from rawlog_factory import scenario
from timeline.converters import convert
from timeline.converters import merge_traces as mt
from timeline.converters.trace_set import SplitSpec
from timeline.trace_processor import open_trace
import trace_set_paint
from trace_set_paint import STEP

painted = trace_set_paint.painted  # a fixture
OFFSET = 5_000_000_000  # node b booted 5 s earlier: its BOOTTIME is ahead


def _as_node_b(src_set: str, dst_set: str) -> None:
    """The set as another machine would have written it: every BOOTTIME time `OFFSET` ns ahead
    (REALTIME kept), its host "node-b"."""
    os.mkdir(dst_set)
    idx = json.load(open(os.path.join(src_set, "index.json")))
    for c in idx["chunks"]:
        t = pb.Trace()
        t.ParseFromString(open(os.path.join(src_set, c["file"]), "rb").read())
        for pkt in t.packet:
            mt._rewrite(pkt, 0, OFFSET)
            pkt.ClearField("machine_id")
            for m in pkt.chrome_events.metadata:
                if m.name == "timeline_host":
                    m.string_value = "node-b"
        open(os.path.join(dst_set, c["file"]), "wb").write(t.SerializeToString())
        c.update(start_ns=c["start_ns"] + OFFSET, end_ns=c["end_ns"] + OFFSET, machine="node-b", rank=1)
    json.dump(idx, open(os.path.join(dst_set, "index.json"), "w"))


@pytest.fixture
def two_sets(tmp_path, painted):
    res = convert(scenario(tmp_path / "a.tlraw"), str(tmp_path / "a.pftrace"), split=SplitSpec(duration_ns=STEP))
    _as_node_b(res.out_path, str(tmp_path / "b.tlset"))
    return res.out_path, str(tmp_path / "b.tlset")


SLICES = ("select m.id machine, s.ts, s.dur, s.name from slice s join thread_track tt on s.track_id = tt.id "
          "join thread using (utid) join process p using (upid) left join machine m on p.machine_id = m.id "
          "order by 1, 2, 4")


def test_two_machines_merge_window_by_window(two_sets, tmp_path):
    a, b = two_sets
    cp = timeline_cmd("merge", "--split", a, b, "-o", str(tmp_path / "job.pftrace"))
    assert cp.returncode == 0, cp.stderr
    assert "trace set" in cp.stderr and "2 machines" in cp.stderr, cp.stderr
    out = tmp_path / "job.tlset"
    idx = json.loads((out / "index.json").read_text())
    a_chunks = json.loads(open(os.path.join(a, "index.json")).read())["chunks"]
    assert idx["format"] == "timeline-trace-set" and len(idx["chunks"]) == len(a_chunks) == 5
    assert sorted(os.listdir(out)) == sorted([c["file"] for c in idx["chunks"]] + ["index.json"])
    for k, (c, ca) in enumerate(zip(idx["chunks"], a_chunks)):
        # node b's chunk k holds the same instants of wall-clock time as node a's: the same window
        assert (c["start_ns"], c["end_ns"]) == (ca["start_ns"], ca["end_ns"])
        assert [(m["machine_id"], m["machine"], m["rank"], os.path.basename(m["source"])) for m in c["machines"]] == \
            [(0, "testhost", None, ca["file"]), (1, "node-b", 1, ca["file"])]
        assert c["machines"][1]["shift_ns"] == -OFFSET and c["events"] == 2 * ca["events"]
        assert c["bytes"] == os.path.getsize(out / c["file"])
        with open_trace(str(out / c["file"])) as tp:
            rows = tp.query(SLICES).rows
            with open_trace(os.path.join(a, ca["file"])) as ta:
                ref = Counter((ts, dur, name) for _, ts, dur, name in ta.query(SLICES).rows)
            by_machine = [Counter((ts, dur, name) for m, ts, dur, name in rows if (m or 0) == i) for i in (0, 1)]
            # each machine's slices of the window, node b's moved back onto node a's clock
            assert by_machine[0] == ref and by_machine[1] == ref, k
            assert tp.query("select count(*) from process where pid = 1000").rows[0][0] == 2


def test_merge_split_refuses_a_non_set_directory_at_the_name(two_sets, tmp_path):
    a, b = two_sets
    (tmp_path / "job.tlset").mkdir()
    (tmp_path / "job.tlset" / "mine.txt").write_text("x")
    cp = timeline_cmd("merge", "--split", a, b, "-o", str(tmp_path / "job.pftrace"))
    assert cp.returncode != 0 and "not a trace set" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1
    assert os.listdir(tmp_path / "job.tlset") == ["mine.txt"]
