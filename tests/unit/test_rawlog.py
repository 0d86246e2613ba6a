import os
import stat

import numpy as np
import pytest

from timeline import events, sched_records
from timeline.rawlog import MAGIC, RawLogError, RawLogReader, RawLogWriter


def _records(n):
    a = np.zeros(n, sched_records.SCHED_EVENT)
    a["ts"] = np.arange(n) * 1000 + 5
    a["tid"] = 7
    a["kind"] = sched_records.SCHED_SWITCH
    return a


def _write(path, blocks=3, finish=True):
    w = RawLogWriter(str(path), {"version": 1, "rings": {}})
    for i in range(blocks):
        w.write_ring(sched_records.RING_SCHED, events.encode_ring_bytes(_records(10 + i)))
    w.write_meta({"type": "note", "i": 1})
    if finish:
        w.finish({"drops": {}})
    w.close()


def test_roundtrip_and_mode(tmp_path):
    p = tmp_path / "a.tlraw"
    _write(p)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    with RawLogReader(str(p)) as r:
        assert r.header["version"] == 1
        blocks = list(r.blocks())
        assert r.finalized and r.damage is None
    rings = [events.decode_ring_bytes(b.payload, sched_records.SCHED_EVENT) for b in blocks if b.kind == b"RING"]
    assert [len(x) for x in rings] == [10, 11, 12]
    assert rings[2]["ts"][-1] == 11 * 1000 + 5


def test_discarded_records_are_skipped():
    raw = bytearray(events.encode_ring_bytes(_records(3)))
    stride = events.ring_stride(sched_records.SCHED_EVENT)
    raw[stride + 3] |= 0x40  # DISCARD bit of record 1's length word
    got = events.decode_ring_bytes(bytes(raw), sched_records.SCHED_EVENT)
    assert list(got["ts"]) == [5, 2005]


# The log ends with a 45-byte META block: cutting 7 or 30 bytes damages only
# it, cutting 100 reaches into the last RING block too.
@pytest.mark.parametrize("cut,rings_left", [(7, 3), (30, 3), (100, 2)])
def test_truncated_tail_keeps_earlier_blocks(tmp_path, cut, rings_left):
    p = tmp_path / "t.tlraw"
    _write(p, finish=False)
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size - cut)
    with RawLogReader(str(p)) as r:
        blocks = list(r.blocks())
        assert r.damage is not None and not r.finalized
        assert "truncated" in r.damage.reason
    assert sum(b.kind == b"RING" for b in blocks) == rings_left


def test_checksum_mismatch_stops_reading(tmp_path):
    p = tmp_path / "c.tlraw"
    _write(p)
    data = bytearray(p.read_bytes())
    data[-5] ^= 0xFF  # inside the END block's JSON payload
    p.write_bytes(bytes(data))
    with RawLogReader(str(p)) as r:
        list(r.blocks())
        assert r.damage is not None and "checksum" in r.damage.reason
        assert not r.finalized


def test_not_a_raw_log(tmp_path):
    p = tmp_path / "x.tlraw"
    p.write_bytes(b"hello world, not a log")
    with pytest.raises(RawLogError, match="not a timeline raw log"):
        RawLogReader(str(p))
    p.write_bytes(b"")
    with pytest.raises(RawLogError):
        RawLogReader(str(p))
    p.write_bytes(MAGIC)
    with pytest.raises(RawLogError, match="no header"):
        RawLogReader(str(p))
    with pytest.raises(RawLogError, match="cannot open"):
        RawLogReader(str(tmp_path / "missing.tlraw"))


def test_background_writer_keeps_order_with_a_tiny_queue(tmp_path):
    # max_queued smaller than two blocks: writers must wait for the thread.
    p = tmp_path / "bg.tlraw"
    w = RawLogWriter(str(p), {"version": 1, "rings": {}}, background=True, max_queued=600)
    for i in range(200):
        w.write_ring(sched_records.RING_SCHED, events.encode_ring_bytes(_records(1 + i % 7)))
        if i % 50 == 0:
            w.write_meta({"type": "note", "i": i})
    w.finish({"drops": {}})
    w.close()
    with RawLogReader(str(p)) as r:
        blocks = list(r.blocks())
        assert r.finalized and r.damage is None
    sizes = [len(events.decode_ring_bytes(b.payload, sched_records.SCHED_EVENT)) for b in blocks if b.kind == b"RING"]
    assert sizes == [1 + i % 7 for i in range(200)]
    assert [b.json()["i"] for b in blocks if b.kind == b"META"] == [0, 50, 100, 150]
    assert os.path.getsize(p) == w.bytes_written
