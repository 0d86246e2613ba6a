"""Python mirror of timeline/net/records.h: the net family's ring.

records.h is the one definition; tests/unit/test_layout.py checks this dtype
and these constants against it and against the BTF of net.bpf.o.
"""
from __future__ import annotations

import enum

import numpy as np

RING_NET = 11

NET_BUCKET_NS = 10_000_000

NET_IO = 1
NET_RETRANSMIT = 2
NET_STATE = 3
NET_RTT = 4
NET_SOFTIRQ = 5
NET_RECV_WAIT = 6
NET_CA_LOSS = 4

NET_EVENT = np.dtype([
    ("ts", "<u8"), ("end_ts", "<u8"), ("sk", "<u8"), ("tx_bytes", "<u8"), ("rx_bytes", "<u8"),
    ("tid", "<u4"), ("tgid", "<u4"), ("tx_calls", "<u4"), ("rx_calls", "<u4"), ("errors", "<u4"), ("eagain", "<u4"),
    ("srtt_us", "<u4"), ("snd_cwnd", "<u4"), ("snd_wnd", "<u4"), ("rcv_wnd", "<u4"), ("total_retrans", "<u4"),
    ("retrans_out", "<u4"), ("saddr", "u1", (16,)), ("daddr", "u1", (16,)),
    ("sport", "<u2"), ("dport", "<u2"), ("family", "<u2"), ("cpu", "<u2"),
    ("kind", "u1"), ("protocol", "u1"), ("oldstate", "u1"), ("newstate", "u1"), ("msg_flags", "<u4"),
])

TCP_STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT",
              7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING", 12: "NEW_SYN_RECV"}

# icsk_ca_state at a retransmit: Open/Disorder/CWR: a probe (tail loss probe) or
# reordering; Recovery: fast retransmit after duplicate ACKs; Loss: after a timeout (RTO).
CA_STATES = {0: "open", 1: "disorder", 2: "cwr", 3: "recovery", 4: "loss"}


class NetKind(enum.IntEnum):
    """The `kind` field's values, named as the recorder's summary names them."""
    net_io = NET_IO
    net_retransmit = NET_RETRANSMIT
    net_state = NET_STATE
    net_rtt = NET_RTT
    net_softirq = NET_SOFTIRQ
    net_recv_wait = NET_RECV_WAIT
