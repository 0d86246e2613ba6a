"""Descriptor of the net family: socket traffic, TCP retransmits, state
changes and RTT of the recorded threads' connections, NET softirq time per CPU.

BPF program net.bpf.c and record layout records.h (mirrored by records.py)
are beside it; docs/kernel-context.md says what the trace shows."""
from __future__ import annotations

from dataclasses import dataclass

from ..family import MIB, CheckData, Family, Ring, option
from . import kernel_supported, records


# --net-recv-min-ms bounds: below 0.1 ms nearly every receive would be a record
MIN_RECV_MS, MAX_RECV_MS = 0.1, 3_600_000.0


def recv_min_ok(ms: float) -> bool:
    """0 (off), or finite and within the bounds (nan fails)."""
    return ms == 0 or MIN_RECV_MS <= ms <= MAX_RECV_MS


@dataclass(frozen=True)
class NetOptions:
    net_softirq: bool = option(False, "--net-softirq", is_flag=True,
                               help="net family: also NET_RX/NET_TX softirq time per CPU (a probe on every "
                                    "softirq of the machine, most of the family's cost; off by default).")
    # off by default: the entry probe's dispatch alone (~470 ns a call on this VM) put the family
    # over 1% of a gloo rank's step, whose non-blocking receives never make a slice
    # (docs/benchmarks.md, network family)
    net_recv_min_ms: float = option(0.0, "--net-recv-min-ms", type=float, metavar="MS",
                                    help="net family: a recv()/recvmsg() that blocked at least this long is a "
                                         f"'recv blocked' slice (at least {MIN_RECV_MS:g}, e.g. 1; default 0: "
                                         "off, no receive-syscall probes).")

NET = Family(
    name="net",
    help="socket bytes/calls per thread and connection (10 ms buckets), receives that blocked, TCP "
         "retransmits, state changes and RTT of the recorded threads' connections; NET_RX/NET_TX softirq time per CPU with --net-softirq "
         "(Linux >= 6.3)",
    rings=(Ring(records.RING_NET, records.NET_EVENT, "tl_net_event", records.NetKind, "net_ring", MIB,
                header="net/records.h"),),
    bpf_object="net.bpf.o",
    programs=("tl_net_send", "tl_net_recv", "tl_net_retransmit", "tl_net_state"),
    # attached by the plugin: the softirq accounting with --net-softirq only, the
    # receive-syscall entries unless --net-recv-min-ms 0
    plugin_programs=("tl_net_softirq_entry", "tl_net_softirq_exit", "tl_net_recvfrom", "tl_net_recvmsg"),
    options=NetOptions,
    requires="Linux >= 6.3 (sock_send_length/sock_recv_length tracepoints, BTF tracepoints)",
    supported=kernel_supported,
    # opt-in (-e ...,net): its programs take ~1.2% of one CPU-step of bench/net_cost.py's job
    # (2026-11-26, ~2.6% before issue 24), ~1.8% with the receive-syscall entries (blocked
    # receives; docs/benchmarks.md); ≤ 1% not shown
    default_on=False,
    plugin="timeline.net.plugin:NetPlugin",
    converters=("timeline.net.convert:NetConverter",),
    check_data=(CheckData("net", "exists(select 1 from counter_track where name glob 'net *')",
                          "network counters of the net family (net <connection> ...)",
                          counters="net *"),),
)
