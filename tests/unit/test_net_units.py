"""net family without a recording: a blocked receive's record -> its 'recv blocked' slice.
Recordings: tests/system/test_net_recv.py (loopback), tests/system/test_net.py (two namespaces)."""
import errno

import numpy as np
import pytest

from timeline.errors import UserError
from timeline.net import records
from timeline.net.convert import NetConverter, msg_flags
from timeline.net.family import NetOptions
from timeline.net.plugin import NetPlugin


class Sink:
    def __init__(self):
        self.slices, self.instants = [], []

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None):
        self.slices.append((ts, dur, tid, pid, name, cat, args))

    def instant(self, ts, tid, pid, name, cat, args=None):
        self.instants.append((ts, tid, pid, name, cat, args))


def recv_wait(ts, end, tid, *, nbytes=0, err=0, flags=0):
    r = np.zeros(1, records.NET_EVENT)
    r["kind"] = records.NET_RECV_WAIT
    r["ts"], r["end_ts"], r["tid"], r["tgid"] = ts, end, tid, 500
    r["family"], r["sport"], r["dport"] = 2, 41000, 29500
    r["saddr"][0, :4] = (10, 0, 0, 1)
    r["daddr"][0, :4] = (10, 0, 0, 2)
    r["rx_bytes"], r["errors"], r["msg_flags"] = nbytes, err, flags
    return r


def emit(recs):
    sink = Sink()
    NetConverter(model=None).emit_ring(sink, records.RING_NET, recs)
    return sink


def test_blocked_receive_is_a_slice_on_its_thread_with_the_connection():
    sink = emit(recv_wait(1_000_000, 301_000_000, 501, nbytes=1234))
    assert not sink.instants
    assert sink.slices == [(1_000_000, 300_000_000, 501, 500, "recv blocked", "net",
                            {"conn": "10.0.0.1:41000 ↔ 10.0.0.2:29500", "local": "10.0.0.1:41000",
                             "peer": "10.0.0.2:29500", "bytes": 1234})]


def test_error_and_flags_are_named():
    (s,) = emit(recv_wait(10, 5_000_010, 7, err=errno.ECONNRESET, flags=0x2 | 0x100 | 0x8000)).slices
    assert s[6]["error"] == "ECONNRESET" and s[6]["bytes"] == 0
    assert s[6]["flags"] == "MSG_PEEK|MSG_WAITALL|0x8000"


def test_receive_slices_and_instants_from_one_block_keep_their_kinds():
    recs = np.concatenate([recv_wait(10, 2_000_010, 7, nbytes=1), recv_wait(50, 50, 7)])
    recs["kind"][1] = records.NET_RETRANSMIT
    recs = np.concatenate([recs, np.zeros(1, records.NET_EVENT)])  # kind 0: nothing
    sink = emit(recs)
    assert [s[4] for s in sink.slices] == ["recv blocked"]
    assert [i[3] for i in sink.instants] == ["tcp retransmit"]


def test_msg_flags():
    assert msg_flags(0) == ""
    assert msg_flags(0x40) == "MSG_DONTWAIT"


@pytest.mark.parametrize("ms", [float("nan"), float("inf"), -1.0, 0.05, 1e9])
def test_recv_minimum_out_of_bounds_is_refused_before_recording(ms):
    with pytest.raises(UserError, match="--net-recv-min-ms"):
        NetPlugin(None, NetOptions(net_recv_min_ms=ms)).preflight()


@pytest.mark.parametrize("ms, ns", [(0.0, 1), (0.1, 100_000), (1.0, 1_000_000), (250.0, 250_000_000)])
def test_recv_minimum_reaches_the_program(ms, ns):
    plugin = NetPlugin(None, NetOptions(net_recv_min_ms=ms))
    plugin.preflight()
    assert plugin.rodata() == {"recv_min_ns": ns}
