"""timeline merge labels a connection track with the rank that owns its peer
endpoint (converters/merge_traces.py, peer_ranks): across machines, loopback
only on the same machine, never when two ranks claim the endpoint."""
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from timeline.converters import merge_traces as mt

BOOT, WALL = 10**12, 1_700_000_000 * 10**9
ARROW = "\u2194"


def trace(pid, rank, conns):
    """One machine's trace: a clock snapshot, process pid labelled rank=N
    (None: no label) and a counter track per (local, peer) under it."""
    t = pb.Trace()
    snap = t.packet.add().clock_snapshot
    for cid, ts in ((mt.CLOCK_BOOTTIME, BOOT), (mt.CLOCK_REALTIME, WALL)):
        snap.clocks.add(clock_id=cid, timestamp=ts)
    td = t.packet.add(timestamp=BOOT).track_descriptor
    td.uuid, td.process.pid = 100 + pid, pid
    if rank is not None:
        td.process.process_labels.append(f"rank={rank}")
    for i, (local, peer) in enumerate(conns):
        td = t.packet.add(timestamp=BOOT).track_descriptor
        td.uuid, td.parent_uuid, td.name = 1000 + i, 100 + pid, f"net {local} {ARROW} {peer} srtt_ms"
        td.counter.SetInParent()
    return t.SerializeToString()


def merged_names(*traces):
    inputs = [mt.parse(f"m{i}.pftrace", data) for i, data in enumerate(traces)]
    out = []
    mt.merge(inputs, out.append)
    t = pb.Trace.FromString(b"".join(out))
    return sorted(p.track_descriptor.name for p in t.packet if p.track_descriptor.name.startswith("net "))


def test_peer_endpoint_owned_by_a_rank_on_another_machine_is_labelled():
    a = trace(10, 0, [("10.0.0.1:5000", "10.0.0.2:6000"), ("10.0.0.1:5001", "10.9.9.9:80")])
    b = trace(20, 1, [("10.0.0.2:6000", "10.0.0.1:5000")])
    assert merged_names(a, b) == [
        f"net 10.0.0.1:5000 {ARROW} 10.0.0.2:6000 (rank 1) srtt_ms",
        f"net 10.0.0.1:5001 {ARROW} 10.9.9.9:80 srtt_ms",  # nobody recorded owns the peer
        f"net 10.0.0.2:6000 {ARROW} 10.0.0.1:5000 (rank 0) srtt_ms",
    ]


def test_loopback_peers_stay_on_their_machine():
    a = trace(10, 0, [("127.0.0.1:5000", "127.0.0.1:6000")])
    b = trace(20, 1, [("127.0.0.1:6000", "127.0.0.1:5000")])
    assert not [n for n in merged_names(a, b) if "(rank" in n]


def test_unranked_or_ambiguous_owners_leave_the_name_alone():
    a = trace(10, None, [("10.0.0.1:5000", "10.0.0.2:6000")])
    b = trace(20, 1, [("10.0.0.2:6000", "10.0.0.1:5000")])
    c = trace(30, 2, [("10.0.0.2:6000", "10.0.0.3:7000")])  # claims rank 1's endpoint too
    names = merged_names(a, b, c)
    assert not [n for n in names if "(rank" in n], names


def test_connection_names_parse():
    assert mt.connection(f"net [::1]:80 {ARROW} [::1]:9 sent_bytes_per_s") == ("[::1]:80", "[::1]:9", "sent_bytes_per_s")
    assert mt.connection("net cpu0 NET_RX busy_pct") is None
