"""Network context (the `net` event family): what the recorded threads' sockets did.

    records.h/.py  the ring's record (records.h is the definition)
    net.bpf.c      per (thread, socket) counts in 10 ms buckets, retransmits,
                   TCP state changes, RTT samples, receives that blocked,
                   NET softirq time per CPU
    plugin.py      flushes the buckets still open when recording stops
    convert.py     tracks per connection, throughput counters, retransmit instants,
                   'recv blocked' slices

docs/kernel-context.md says what each track and check means.
"""
import os

# tp_btf programs on these tracepoints (sock_send_length/sock_recv_length came in Linux 6.3),
# and plain tracepoint programs on the syscall entries.
TRACEPOINTS = ("sock/sock_send_length", "sock/sock_recv_length", "sock/inet_sock_set_state",
               "tcp/tcp_retransmit_skb", "irq/softirq_entry", "irq/softirq_exit",
               "syscalls/sys_enter_recvfrom", "syscalls/sys_enter_recvmsg")


def kernel_supported(release: str | None = None) -> bool:
    try:
        major, minor = (int(x) for x in (release or os.uname().release).split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (6, 3)
