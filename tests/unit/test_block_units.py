"""block family without a recording: the rwbs flags decoded. Recordings: tests/system/test_block.py.
"""
from timeline.kctx import block_records
from timeline.kctx.convert_block import rwbs


def test_rwbs():
    assert rwbs(0, 0) == "R"
    assert rwbs(0, block_records.BF_RAHEAD) == "RA"
    assert rwbs(1, block_records.BF_SYNC | block_records.BF_FUA) == "WFS"
    assert rwbs(2, block_records.BF_PREFLUSH) == "FF"
    assert rwbs(3, 0) == "D"
    assert rwbs(9, 0) == "N"
