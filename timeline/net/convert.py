"""Net records -> per-connection and per-thread counters, TCP event instants,
per-CPU softirq counters.

Connection tracks (counters under the process that owns the socket), named
'net <local> ↔ <peer> <what>': sent_bytes_per_s and received_bytes_per_s per
10 ms bucket (all threads of the process together), srtt_ms, snd_cwnd
(segments), snd_wnd and rcv_wnd (bytes) at each RTT sample, retransmits
(the count so far in the recording).  Per thread: 'net <thread> (<tid>)
sent_bytes_per_s' / 'received_bytes_per_s'.  Per CPU (system-wide):
'net cpu<N> NET_RX busy_pct' / 'NET_TX busy_pct', the share of each bucket
spent in those softirqs.

Instants (category 'net') on the thread that last used the socket:
'tcp retransmit' (args conn, local, peer, ca_state, lost (a loss recovery:
fast retransmit or timeout, not a tail loss probe), rto (after a timeout),
srtt_ms, snd_cwnd, total_retrans, state) and 'tcp <OLD> -> <NEW>' state changes.

Slices (category 'net') on the receiving thread: 'recv blocked', one
recvfrom()/recvmsg() that took at least --net-recv-min-ms, from the syscall's
entry to its return (args conn, local, peer, bytes, and error (an errno name)
or flags (MSG_PEEK, MSG_WAITALL...) when there are any).
"""
from __future__ import annotations

import errno
import ipaddress

import numpy as np

from ..converters.families import FamilyConverter
from . import records

B = records.NET_BUCKET_NS
MSG_FLAGS = {0x1: "MSG_OOB", 0x2: "MSG_PEEK", 0x20: "MSG_TRUNC", 0x40: "MSG_DONTWAIT", 0x100: "MSG_WAITALL",
             0x2000: "MSG_ERRQUEUE"}


def msg_flags(flags: int) -> str:
    """'MSG_PEEK|MSG_WAITALL' (unknown bits in hex), '' for none."""
    names = [n for bit, n in MSG_FLAGS.items() if flags & bit]
    rest = flags & ~sum(MSG_FLAGS)
    return "|".join(names + ([hex(rest)] if rest else []))


def endpoint(family: int, addr: np.ndarray, port: int) -> str:
    raw = bytes(addr.tolist())
    if family == 10:
        ip = ipaddress.IPv6Address(raw)
        if ip.ipv4_mapped:
            return f"{ip.ipv4_mapped}:{port}"
        return f"[{ip}]:{port}"
    return f"{ipaddress.IPv4Address(raw[:4])}:{port}"


def conn_names(recs: np.ndarray) -> list[tuple[str, str]]:
    """(local, peer) of each record."""
    return [(endpoint(f, s, sp), endpoint(f, d, dp))
            for f, s, sp, d, dp in zip(recs["family"].tolist(), recs["saddr"], recs["sport"].tolist(),
                                      recs["daddr"], recs["dport"].tolist())]


def bucket_steps(ts: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-bucket sums of values (by the bucket of ts) as a step counter: the
    sum at each active bucket's start, 0 where the next bucket is idle."""
    bins = ts.astype(np.int64) // B
    ub, inv = np.unique(bins, return_inverse=True)
    sums = np.bincount(inv.ravel(), values.astype(np.float64), ub.size)
    idle_next = np.setdiff1d(ub + 1, ub)
    t = np.concatenate([ub, idle_next]) * B
    v = np.concatenate([sums, np.zeros(idle_next.size)])
    order = np.argsort(t, kind="stable")
    return t[order], v[order]


class NetConverter(FamilyConverter):
    rings = (records.RING_NET,)

    def __init__(self, model):
        super().__init__(model)
        self.parts: list[np.ndarray] = []

    def scan_ring(self, ring, recs) -> None:
        self.parts.append(recs.copy())

    def emit_ring(self, sink, ring, recs) -> None:
        events = recs[np.isin(recs["kind"], (records.NET_RETRANSMIT, records.NET_STATE, records.NET_RECV_WAIT))]
        for r, (local, peer) in zip(events, conn_names(events)):
            args = {"conn": f"{local} ↔ {peer}", "local": local, "peer": peer}
            if r["kind"] == records.NET_RECV_WAIT:
                self._recv_wait(sink, r, args)
                continue
            if r["kind"] == records.NET_RETRANSMIT:
                name = "tcp retransmit"
                ca = int(r["oldstate"])
                args.update(ca_state=records.CA_STATES.get(ca, str(ca)), rto=ca == records.NET_CA_LOSS,
                            lost=ca >= 3, srtt_ms=int(r["srtt_us"]) / 1000,
                            snd_cwnd=int(r["snd_cwnd"]), total_retrans=int(r["total_retrans"]),
                            state=records.TCP_STATES.get(int(r["newstate"]), str(int(r["newstate"]))))
            else:
                old, new = (records.TCP_STATES.get(int(r[k]), str(int(r[k]))) for k in ("oldstate", "newstate"))
                name = f"tcp {old} -> {new}"
            sink.instant(int(r["ts"]), int(r["tid"]), int(r["tgid"]) or None, name, "net", args)

    @staticmethod
    def _recv_wait(sink, r, args: dict) -> None:
        args["bytes"] = int(r["rx_bytes"])
        err = int(r["errors"])
        if err:
            args["error"] = errno.errorcode.get(err, str(err))
        flags = msg_flags(int(r["msg_flags"]))
        if flags:
            args["flags"] = flags
        ts = int(r["ts"])
        sink.slice(ts, max(int(r["end_ts"]) - ts, 0), int(r["tid"]), int(r["tgid"]) or None, "recv blocked", "net",
                   args)

    def finish(self, sink) -> None:
        if not self.parts:
            return
        recs = np.concatenate(self.parts)
        recs = recs[np.argsort(recs["ts"], kind="stable")]
        self._connections(sink, recs)
        self._threads(sink, recs[recs["kind"] == records.NET_IO])
        self._softirq(sink, recs[recs["kind"] == records.NET_SOFTIRQ])

    def _connections(self, sink, recs) -> None:
        conn = recs[np.isin(recs["kind"], (records.NET_IO, records.NET_RTT, records.NET_RETRANSMIT))]
        names = conn_names(conn)
        groups: dict[tuple[int, str], list[int]] = {}
        for i, (tgid, (local, peer)) in enumerate(zip(conn["tgid"].tolist(), names)):
            groups.setdefault((tgid, f"net {local} ↔ {peer}"), []).append(i)
        for (tgid, label), idx in sorted(groups.items()):
            g = conn[np.array(idx)]
            pid = tgid or None
            io = g[g["kind"] == records.NET_IO]
            for field, what in (("tx_bytes", "sent_bytes_per_s"), ("rx_bytes", "received_bytes_per_s")):
                if io.size and io[field].any():
                    t, v = bucket_steps(io["ts"], io[field])
                    sink.counters(f"{label} {what}", t, v * (1e9 / B), pid=pid)
            rtt = g[g["kind"] == records.NET_RTT]
            if rtt.size:
                sink.counters(f"{label} srtt_ms", rtt["ts"], rtt["srtt_us"] / 1000.0, pid=pid)
                for field in ("snd_cwnd", "snd_wnd", "rcv_wnd"):
                    sink.counters(f"{label} {field}", rtt["ts"], rtt[field].astype(np.int64), pid=pid)
            rx = g[g["kind"] == records.NET_RETRANSMIT]
            if rx.size:
                sink.counters(f"{label} retransmits", rx["ts"], np.arange(1, rx.size + 1), pid=pid)

    def _threads(self, sink, io) -> None:
        for tid in np.unique(io["tid"]).tolist():
            g = io[io["tid"] == tid]
            name = self.model.thread_name(tid) or "thread"
            pid = int(g["tgid"][0]) or None
            for field, what in (("tx_bytes", "sent_bytes_per_s"), ("rx_bytes", "received_bytes_per_s")):
                if g[field].any():
                    t, v = bucket_steps(g["ts"], g[field])
                    sink.counters(f"net {name} ({tid}) {what}", t, v * (1e9 / B), pid=pid)

    @staticmethod
    def _softirq(sink, sq) -> None:
        for cpu in np.unique(sq["cpu"]).tolist():
            g = sq[sq["cpu"] == cpu]
            for field, what in (("rx_bytes", "NET_RX"), ("tx_bytes", "NET_TX")):
                if g[field].any():
                    t, v = bucket_steps(g["ts"], g[field])
                    sink.counters(f"net cpu{cpu} {what} busy_pct", t, v * (100.0 / B))
