"""timeline.trace_file: what a trace file is, its gzip read in bounded pieces,
its protobuf packets (no root, no BPF)."""
from __future__ import annotations

import gzip
import os

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from timeline import trace_file as tf
from timeline.rawlog import MAGIC


def _fd(tmp_path, name: str, data: bytes) -> int:
    p = tmp_path / name
    p.write_bytes(data)
    return tf.open_trace_file(str(p))


def _trace(n: int = 3) -> bytes:
    t = pb.Trace()
    for i in range(n):
        p = t.packet.add()
        p.timestamp = 1000 + i
        p.track_event.name = f"slice {i}" * (i * 50)  # one packet long enough for a 2-byte length
    return t.SerializeToString()


def test_sniff():
    trace = _trace()
    assert tf.sniff(MAGIC + b"\0" * 8) == tf.RAW
    assert tf.sniff(gzip.compress(b"{}")) == tf.GZIP
    assert tf.sniff(b'  {"traceEvents": []}') == tf.sniff(b'[{"ph": "X"}]') == tf.JSON
    assert tf.sniff(trace) == tf.sniff(trace[:7]) == tf.PROTO  # cut inside the first packet: still a trace
    assert tf.sniff(b"\nhello world\n") is None and tf.sniff(b"[garbage") is None
    assert tf.sniff(b"\x0a\x02\x00\x01") is None  # field number 0
    assert tf.sniff(b"\x0a\x02\x08\x80" + b"\x0a\x00") is None  # a field overrunning its (whole) packet


def test_format_for_is_case_insensitive():
    assert tf.format_for("a.JSON") == tf.format_for("b.json.GZ") == "chrome"
    assert tf.format_for("a.pftrace") == tf.format_for("a.json.txt") == "perfetto"
    assert tf.is_gzip_name("x.JSON.GZ") and not tf.is_gzip_name("x.json")


def test_inflate_members_padding_and_damage(tmp_path):
    body = os.urandom(3 << 20)  # incompressible: several feeds and pieces
    data = gzip.compress(body[:1 << 20]) + gzip.compress(body[1 << 20:]) + b"\0" * 512
    fd = _fd(tmp_path, "ok.gz", data)
    assert b"".join(tf.inflate(fd, "ok.gz")) == body
    assert bytes(tf.read_whole(fd, "ok.gz")) == body
    os.close(fd)
    fd = _fd(tmp_path, "cut.gz", data[: len(data) // 2])
    with pytest.raises(tf.TraceFileError, match="truncated gzip"):
        tf.read_whole(fd, "cut.gz")
    os.close(fd)
    bad = bytearray(gzip.compress(body[:100000]))
    bad[len(bad) // 2] ^= 0xFF
    fd = _fd(tmp_path, "bad.gz", bytes(bad))
    with pytest.raises(tf.TraceFileError, match="corrupt gzip"):
        list(tf.inflate(fd, "bad.gz"))
    os.close(fd)


def test_caps(tmp_path, monkeypatch):
    zeros = gzip.compress(bytes(8 << 20))
    fd = _fd(tmp_path, "z.gz", zeros)
    with pytest.raises(tf.TraceFileError, match="decompresses to more than 4 MiB"):
        tf.read_whole(fd, "z.gz", limit=4 << 20)
    monkeypatch.setenv(tf.MAX_TRACE_ENV, str(1 << 20))
    assert tf.max_trace_bytes() == 1 << 20
    with pytest.raises(tf.TraceFileError, match="more than 1 MiB"):
        list(tf.inflate(fd, "z.gz"))
    os.close(fd)
    fd = _fd(tmp_path, "plain", bytes(2 << 20))
    with pytest.raises(tf.TraceFileError, match="larger than 1 MiB"):
        tf.read_whole(fd, "plain")
    os.close(fd)
    for junk in ("", "-1", "0", "1e9", "²"):
        monkeypatch.setenv(tf.MAX_TRACE_ENV, junk)
        assert tf.max_trace_bytes() == tf.MAX_TRACE_BYTES


def test_packet_spans_and_fields():
    data = _trace(4)
    spans = list(tf.packet_spans(data))
    assert [pb.TracePacket.FromString(data[a:b]).timestamp for a, b in spans] == [1000, 1001, 1002, 1003]
    for cut in (data[:-1], data + b"\x0a", data + b"\x0b"):  # cut off; a length missing; wire type 3
        with pytest.raises(tf.ProtoError):
            list(tf.packet_spans(cut))
    a, b = spans[1]
    got = {n: v for n, _, v in tf.fields(data[a:b])}
    assert got[8] == 1001 and isinstance(got[11], bytes)  # timestamp; track_event
    assert list(tf.fields(b"\x08")) == []  # malformed: stops quietly


def test_open_refusals_are_one_line(tmp_path):
    (tmp_path / "t").write_bytes(b"x")
    os.symlink(tmp_path / "t", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    cases = {"link": "is a symbolic link; pass the file itself", "fifo": "is not a regular file",
             "missing": "cannot read"}
    for name, msg in cases.items():
        with pytest.raises(tf.TraceFileError) as e:
            tf.open_trace_file(str(tmp_path / name))
        assert msg in str(e.value) and "\n" not in str(e.value)
