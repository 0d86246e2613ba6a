"""A Perfetto trace says whether it is whole: timeline writes a version entry
first and a completeness entry (with counts) last; `check` and `query` warn
when the last one is missing or the counts disagree, and dropped_events is
never OK on such a trace (issue 14: a .pftrace cut in half was called lossless). A trace converted from a cut
recording, and a file cut before timeline's first marker (found by walking the
packet framing), are not complete either (issue 20)."""
from __future__ import annotations

import json

import pytest
from google.protobuf.internal.decoder import _DecodeVarint
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from helpers import timeline_cmd
from rawlog_factory import many_switches, scenario
from timeline.checks.completeness import file_problem
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


def check_json_all(path):
    cp = timeline_cmd("check", "--format", "json", path)
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


# ---------------------------------------------- a cut recording, a cut file

def test_trace_of_a_cut_recording_is_not_complete(tmp_path):
    # a raw log without its END block (recorder killed, disk full), converted anyway
    raw = scenario(str(tmp_path / "killed.tlraw"), end=False)
    for fmt, name in (("perfetto", "t.pftrace"), ("chrome", "t.json")):
        out = str(tmp_path / name)
        assert convert(raw, out, fmt=fmt).finalized is False
        cp = timeline_cmd("check", "--format", "json", out)
        assert cp.returncode == 0, cp.stderr
        doc = json.loads(cp.stdout)
        assert doc["complete"] is False and "recording was cut short" in doc["incomplete"], (fmt, doc["incomplete"])
        de = next(c for c in doc["checks"] if c["id"] == "dropped_events")
        assert de["status"] == "warning" and "recording was cut short" in de["findings"][0]["finding"]
        cp = timeline_cmd("check", out)
        assert cp.returncode == 0, (fmt, cp.returncode, cp.stderr)
        text = cp.stdout.replace("\n", " ")
        assert "warning: the recording was cut short" in text, (fmt, cp.stdout, cp.stderr)
    # the same log with its end is whole
    whole = str(tmp_path / "whole.pftrace")
    convert(scenario(str(tmp_path / "ended.tlraw")), whole, fmt="perfetto")
    assert json.loads(timeline_cmd("check", "--format", "json", whole).stdout)["complete"] is True


def test_pftrace_cut_in_its_first_bytes_says_so(whole, tmp_path):
    cut = tmp_path / "head.pftrace"
    cut.write_bytes(open(whole, "rb").read()[:100])
    doc, _ = check_json_all(str(cut))
    assert doc["complete"] is False and "the file is cut at byte 100," in doc["incomplete"], doc["incomplete"]
    not_recorded = [c for c in doc["checks"] if c["status"] == "not recorded"]
    assert not_recorded and all("not complete" in c["note"] for c in not_recorded)
    text = timeline_cmd("check", str(cut)).stdout.replace("\n", " ")
    assert "warning: the trace is not complete: the file is cut at byte 100," in text
    # query reads the same file's framing, through the descriptor it loaded the trace from
    q = timeline_cmd("query", str(cut), "select 1 as one", "--format", "csv")
    assert q.returncode == 0 and q.stdout.split() == ["one", "1"], q.stderr
    assert "timeline: warning: the trace is not complete: the file is cut at byte 100," in q.stderr, q.stderr


def _packet_ends(data: bytes) -> set:
    """Where each top-level packet ends, by protobuf's own varint decoder."""
    ends, pos = {0}, 0
    while pos < len(data):
        _, pos = _DecodeVarint(data, pos)
        n, pos = _DecodeVarint(data, pos)
        pos += n
        ends.add(pos)
    return ends


def test_packet_framing_finds_every_cut(whole, tmp_path):
    data = open(whole, "rb").read()
    ends = _packet_ends(data)
    cuts = sorted(set(range(1, 400)) | set(range(1, len(data), len(data) // 300)) | set(list(ends)[:50]))
    path = tmp_path / "c.pftrace"
    for n in cuts:
        path.write_bytes(data[:n])
        problem = file_problem(str(path))
        if n in ends:
            assert problem is None, n  # a cut on a packet boundary is for the last-packet marker to find
        else:
            assert problem and f"cut at byte {n:,}," in problem, (n, problem)


def test_cut_chrome_json_says_so(tmp_path):
    out = str(tmp_path / "t.json")
    convert(scenario(str(tmp_path / "a.tlraw")), out, fmt="chrome")
    data = open(out, "rb").read()
    assert file_problem(out) is None
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: len(data) // 2])
    assert "lacks the metadata" in file_problem(str(cut))
    cp = timeline_cmd("check", str(cut))
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1 and "the trace is not complete" in lines[0], cp.stderr
