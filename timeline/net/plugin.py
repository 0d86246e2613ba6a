"""Recorder plugin of the net family: the buckets still open at the end.

net.bpf.c writes a (thread, socket) pair's counts, and a CPU's softirq sums,
when the next activity falls in a later bucket; whatever was counted since a
pair's last bucket is still in the maps (net_io's slots handed out, net_io_more)
when recording stops, so stop() reads them and writes them as records of the
same ring.  The softirq accounting
is attached here, with --net-softirq only: it probes every softirq of the
machine (timers, RCU, scheduler too), most of the family's cost; so are the
receive-syscall entries (blocked receives) unless --net-recv-min-ms is 0."""
from __future__ import annotations

import numpy as np

from .. import events, libbpf
from ..errors import UserError
from ..recorder_plugins import RecorderPlugin
from . import records
from .family import MIN_RECV_MS, recv_min_ok


def _open(rows: np.ndarray) -> np.ndarray:
    """Rows that hold counts not yet written (calls or softirq runs)."""
    return rows[(rows["tx_calls"] > 0) | (rows["rx_calls"] > 0)]


class NetPlugin(RecorderPlugin):
    family = "net"

    @property
    def recv_min_ms(self) -> float:
        return self.options.net_recv_min_ms if self.options is not None else 0.0

    def preflight(self) -> None:
        if not recv_min_ok(self.recv_min_ms):
            raise UserError(f"--net-recv-min-ms {self.recv_min_ms:g}: give a finite number of milliseconds, "
                            f"at least {MIN_RECV_MS:g} (0 turns it off)")

    def header(self) -> dict:
        return {"net_recv_min_ms": float(self.recv_min_ms)}

    def rodata(self) -> dict[str, int]:
        return {"recv_min_ns": round(self.recv_min_ms * 1e6) or 1}  # 0: programs not attached

    def before_launch(self, ctx) -> None:
        obj = ctx.session.objects.get("net")
        if obj is None:
            return
        if self.options is not None and self.options.net_softirq:
            for prog in ("tl_net_softirq_entry", "tl_net_softirq_exit"):
                obj.attach(prog)
        if self.recv_min_ms:  # syscall tracepoints: every recvfrom/recvmsg of the machine runs them
            for prog in ("tl_net_recvfrom", "tl_net_recvmsg"):
                obj.attach(prog)

    def stop(self, ctx) -> None:
        obj = ctx.session.objects.get("net")
        if obj is None:
            return
        io = self._io_slots(obj) + [v for _, v in obj.map("net_io_more").items()]
        rows = [np.frombuffer(b"".join(io), records.NET_EVENT)] if io else []
        rows.append(self._softirq_sums(obj.map("net_cpus")))
        left = _open(np.concatenate(rows))
        if left.size:
            ctx.write_ring(records.RING_NET, events.encode_ring_bytes(left))

    @staticmethod
    def _io_slots(obj) -> list[bytes]:
        """The net_io array entries handed out (net_io_used counts them)."""
        raw = obj.map("net_io_used").lookup(b"\0\0\0\0")
        m = obj.map("net_io")
        used = min(int.from_bytes(raw[:8], "little") if raw else 0, m.max_entries)
        return [v for v in (m.lookup(i.to_bytes(4, "little")) for i in range(used)) if v is not None]

    @staticmethod
    def _softirq_sums(m) -> np.ndarray:
        """struct net_cpu {u64 start; u32 vec, pad; struct tl_net_event acc} of every CPU
        (a per-CPU value: each CPU's copy padded to 8 bytes)."""
        ncpu = libbpf.num_possible_cpus()
        stride = (m.value_size + 7) & ~7
        raw = m.lookup(b"\0\0\0\0", stride * ncpu)
        if raw is None:
            return np.zeros(0, records.NET_EVENT)
        per_cpu = np.frombuffer(raw, np.uint8).reshape(ncpu, stride)[:, 16:16 + records.NET_EVENT.itemsize]
        return np.ascontiguousarray(per_cpu).view(records.NET_EVENT).ravel()
