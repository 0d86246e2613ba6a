"""Packet framing of traces timeline did not write. The completeness entry through
`check` and `query`: tests/system/test_trace_completeness.py.
"""
from __future__ import annotations

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from timeline.checks.completeness import file_problem


def test_framing_of_foreign_traces(tmp_path):
    # a trace from another tool: no timeline markers, whole framing -> nothing to say
    t = pb.Trace()
    t.packet.add(trusted_packet_sequence_id=1).track_descriptor.name = "x" * 300  # a length over one byte
    p = tmp_path / "foreign.pftrace"
    p.write_bytes(t.SerializeToString())
    assert file_problem(str(p)) is None
    p.write_bytes(t.SerializeToString() + b"\x00\x00")  # field 0: not a packet
    assert "damaged" in file_problem(str(p))
    p.write_bytes(b'{"traceEvents": []}')  # someone else's JSON: not judged
    assert file_problem(str(p)) is None
