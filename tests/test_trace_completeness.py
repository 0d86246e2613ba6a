"""A Perfetto trace says whether it is whole: timeline writes a version entry
first and a completeness entry (with counts) last; `check` and `query` warn
when the last one is missing or the counts disagree, and dropped_events is
never OK on such a trace (issue 14: a .pftrace cut in half was called lossless)."""
from __future__ import annotations

import json

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from helpers import timeline_cmd
from rawlog_factory import many_switches
from timeline.converters import convert


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    d = tmp_path_factory.mktemp("complete")
    raw = many_switches(str(d / "run.tlraw"), 20_000)
    out = str(d / "run.pftrace")
    convert(raw, out, fmt="perfetto")
    return out


def check_json(path):
    cp = timeline_cmd("check", "--format", "json", "--only", "dropped_events", path)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout), cp.stderr


def test_whole_trace_is_complete(whole):
    doc, _ = check_json(whole)
    assert doc["complete"] is True and doc["incomplete"] is None
    de = doc["checks"][0]
    assert de["id"] == "dropped_events" and de["status"] == "ok"
    cp = timeline_cmd("query", whole, "select count(*) as n from sched", "--format", "csv")
    assert cp.returncode == 0 and "warning" not in cp.stderr, cp.stderr


@pytest.mark.parametrize("fraction", [0.5, 0.9])
def test_cut_trace_is_not_called_lossless(whole, tmp_path, fraction):
    data = open(whole, "rb").read()
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(data[: int(len(data) * fraction)])
    doc, _ = check_json(str(cut))
    assert doc["complete"] is False and "not complete" in doc["incomplete"]
    de = doc["checks"][0]
    assert de["status"] == "warning" and "not complete" in de["findings"][0]["finding"]
    text = timeline_cmd("check", "--only", "dropped_events", str(cut))
    assert "warning: the trace is not complete" in text.stdout.replace("\n", " ")
    q = timeline_cmd("query", str(cut), "select count(*) from sched", "--format", "csv")
    assert q.returncode == 0 and "timeline: warning: the trace is not complete" in q.stderr


def test_counts_that_disagree_are_reported(whole, tmp_path):
    # A trace whose last packet claims more switches than trace_processor loads
    extra = pb.Trace()
    p = extra.packet.add(trusted_packet_sequence_id=1)
    p.chrome_events.metadata.add(name="timeline_switches", int_value=10**9)
    bad = tmp_path / "bad.pftrace"
    bad.write_bytes(open(whole, "rb").read() + extra.SerializeToString())
    doc, _ = check_json(str(bad))
    assert doc["complete"] is False and "part of it is damaged" in doc["incomplete"]
