/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Family net (timeline/net/family.py, net.bpf.c beside this file): socket
 * traffic, TCP retransmits, state changes and RTT of the recorded threads'
 * connections, and NET_RX/NET_TX softirq time per CPU.  Mirrored once by
 * timeline/net/records.py; tests/unit/test_layout.py checks both against the
 * BTF of net.bpf.o.  Included after vmlinux.h (tracking.bpf.h).
 *
 * Sends and receives are counted in the kernel per (thread, socket) and
 * flushed as one TL_NET_IO record per TL_NET_BUCKET_NS bucket in which the
 * pair was active, so a thread busy-looping on a socket costs an array update
 * per call, not a record.  Rare events (retransmits, state changes, receive
 * calls that blocked at least --net-recv-min-ms) are one record each; RTT samples, taken at those calls, at most one per connection
 * per bucket (TL_NET_BUCKET_NS apart).
 */
#ifndef TIMELINE_NET_RECORDS_H
#define TIMELINE_NET_RECORDS_H

#define TL_RING_NET 11

#define TL_NET_BUCKET_NS 10000000ULL  /* 10 ms */

#define TL_NET_IO         1  /* counts of one (thread, socket) in one bucket: ts = first call, end_ts = last */
#define TL_NET_RETRANSMIT 2  /* one retransmitted segment; tid = last recorded thread that used the socket */
#define TL_NET_STATE      3  /* TCP state change (oldstate -> newstate) */
#define TL_NET_RTT        4  /* sample at a send/recv: srtt_us, snd_cwnd, snd_wnd, rcv_wnd */
#define TL_NET_SOFTIRQ    5  /* one CPU, one bucket: tx_bytes/rx_bytes hold NET_TX/NET_RX ns, tx_calls/rx_calls their runs */
#define TL_NET_RECV_WAIT  6  /* one recvfrom/recvmsg that took >= recv_min_ns: ts = syscall entry, end_ts = return;
                                rx_bytes = bytes returned, errors = errno (0: none), msg_flags; tid = the caller */

#define TL_NET_CA_LOSS 4  /* TCP_CA_Loss: retransmitting after a retransmission timeout */

struct tl_net_event {
	__u64 ts;
	__u64 end_ts;      /* IO, SOFTIRQ: last activity in the bucket; else = ts */
	__u64 sk;          /* the socket (struct sock *): the connection's identity in one recording */
	__u64 tx_bytes;    /* IO: bytes sent (sock_send_length > 0) */
	__u64 rx_bytes;    /* IO: bytes received (MSG_PEEK not counted) */
	__u32 tid;         /* IO: the calling thread; others: the last recorded thread that used the socket */
	__u32 tgid;
	__u32 tx_calls;    /* IO: send calls (errors included) */
	__u32 rx_calls;
	__u32 errors;      /* IO: calls that failed, EAGAIN apart; RECV_WAIT: the errno */
	__u32 eagain;      /* IO: calls that returned -EAGAIN (non-blocking, nothing to do) */
	__u32 srtt_us;     /* RTT: smoothed RTT, microseconds */
	__u32 snd_cwnd;    /* RTT: congestion window, segments */
	__u32 snd_wnd;     /* RTT: peer's receive window, bytes */
	__u32 rcv_wnd;     /* RTT: our receive window, bytes */
	__u32 total_retrans; /* RETRANSMIT, RTT: the connection's retransmits so far (tcp_sock) */
	__u32 retrans_out; /* RETRANSMIT, RTT: segments retransmitted and not yet acknowledged */
	__u8 saddr[16];    /* local address: IPv4 in the first 4 bytes (family 2), or IPv6 (10) */
	__u8 daddr[16];    /* peer address */
	__u16 sport;       /* local port, host order */
	__u16 dport;       /* peer port, host order */
	__u16 family;      /* AF_INET 2, AF_INET6 10 */
	__u16 cpu;
	__u8 kind;         /* TL_NET_* */
	__u8 protocol;     /* IPPROTO_TCP 6, UDP 17 */
	__u8 oldstate;     /* STATE: TCP_* state numbers (1 ESTABLISHED ... 12 NEW_SYN_RECV);
	                      RETRANSMIT: icsk_ca_state (TL_NET_CA_LOSS: after a timeout, an RTO) */
	__u8 newstate;     /* STATE; RETRANSMIT, RTT: the state at the event */
	__u32 msg_flags;   /* RECV_WAIT: the call's flags (MSG_PEEK 2, MSG_WAITALL 0x100...) */
};                     /* 136 bytes */

#endif /* TIMELINE_NET_RECORDS_H */
