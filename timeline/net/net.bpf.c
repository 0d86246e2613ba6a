// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Socket traffic of the tracked threads, their TCP connections' retransmits,
 * state changes and RTT, and NET_RX/NET_TX softirq time per CPU.
 *
 * Sends and receives (sock_send_length / sock_recv_length, which fire once
 * per call, after it) are summed in net_io per (thread, socket); a pair's
 * counts go to the ring when its next call falls in a later
 * TL_NET_BUCKET_NS bucket, and the plugin flushes what is left at the end.
 * So a thread busy-looping non-blocking send()/recv() (NCCL's socket
 * transport, Gloo's device threads) costs one array update per call and at
 * most one record per bucket.  The same calls sample a TCP connection's
 * RTT and windows, at most once per bucket: no program on every received
 * segment (tcp_probe was most of the family's cost; docs/benchmarks.md).
 *
 * Per-socket state (last recorded user, slots of its counts) lives in the
 * socket's local storage (net_sks): found from the socket without a hash
 * lookup, absent on sockets no recorded thread touched, so those cost one
 * NULL from bpf_sk_storage_get (plus the tracked-thread lookup on send/recv).
 * Retransmits run in softirq/timer context, where "current" is whoever was
 * interrupted: they are attributed through it (socket -> last user).
 *
 * Long blocking receives: sock_recv_length fires only after a call returns,
 * so the start of a recvfrom()/recvmsg() of a tracked thread is kept in the
 * thread's task storage (net_recv_entry, by the syscall tracepoints); the
 * receive that ends that same syscall (the task's orig_ax still names it, so
 * an entry left by a failed call never pairs with a later read()) and waited
 * at least recv_min_ns becomes one TL_NET_RECV_WAIT record.
 */
#include "tracking.bpf.h"
#include <bpf/bpf_endian.h>
#include "net/records.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct tl_net_event tl_net_event_layout = {};

#define AF_INET 2
#define AF_INET6 10
#define MSG_PEEK 2
#define MSG_DONTWAIT 0x40
#define EAGAIN 11
#define NET_TX_VEC 2
#define NET_RX_VEC 3

/* A receive that waited at least this long is one record (--net-recv-min-ms). */
const volatile __u64 recv_min_ns = 1000000;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} net_ring SEC(".maps");

/* The receive syscall a tracked thread is in: when it began and which one
 * (ts 0: none).  Task storage: found through the task, no hash lookup, gone
 * with the thread. */
struct net_recv_entry {
	__u64 ts;
	__u32 nr;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct net_recv_entry);
} net_recv_entries SEC(".maps");

/* Per socket (socket local storage: found through the socket itself, no
 * hash lookup, gone with the socket, so a freed socket's memory reused for
 * another connection starts clean).  Only sockets a recorded thread used or
 * opened have one: for every other socket on the machine the programs stop
 * at a NULL from bpf_sk_storage_get. */
#define NET_SLOTS 2
#define NET_SK_IGNORED 1   /* not AF_INET/AF_INET6 (a Unix socket): not counted */
#define NET_SK_TCP 2       /* a TCP socket: RTT samples */

struct net_sk {
	__u32 tid;               /* last recorded thread that used the socket */
	__u32 tgid;
	__u64 user[NET_SLOTS];   /* threads counting in net_io slots (64-bit for cmpxchg) ... */
	__u32 slot[NET_SLOTS];   /* ... their index + 1 (0: none yet) */
	__u32 flags;             /* NET_SK_* */
	__u32 pad;
	__u64 rtt_ts;            /* time of the last RTT sample */
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct net_sk);
} net_sks SEC(".maps");

#define NET_IO_SLOTS 16384

/* (thread, socket) counts in the current bucket, laid out as the record they
 * become, at the index a socket's net_sk gives: an array lookup, not a hash
 * one, on every send/recv.  Slots are handed out once (net_io_used) and not
 * reused: a socket's are lost with it, the plugin writes what they still hold
 * at the end.  Pairs past NET_SLOTS per socket or NET_IO_SLOTS in all count
 * in net_io_more instead, keyed by (socket, thread). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NET_IO_SLOTS);
	__type(key, __u32);
	__type(value, struct tl_net_event);
} net_io SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} net_io_used SEC(".maps");

struct net_io_key {
	__u64 sk;
	__u32 tid;
	__u32 pad;
};

/* LRU: a thread that stops using a socket must not hold its slot forever
 * (an evicted pair loses at most one bucket). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct net_io_key);
	__type(value, struct tl_net_event);
} net_io_more SEC(".maps");

struct net_cpu {
	__u64 start;       /* softirq entry (0: none open) */
	__u32 vec;
	__u32 pad;
	struct tl_net_event acc;
};

/* Per CPU: the open NET softirq and the bucket's sums. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct net_cpu);
} net_cpus SEC(".maps");

static __always_inline void read_addrs(const struct sock *sk, struct tl_net_event *e)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);

	e->family = family;
	e->protocol = BPF_CORE_READ(sk, sk_protocol);
	e->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	e->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (family == AF_INET6) {
		BPF_CORE_READ_INTO(&e->saddr, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
		BPF_CORE_READ_INTO(&e->daddr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	} else {
		BPF_CORE_READ_INTO((__u32 *)e->saddr, sk, __sk_common.skc_rcv_saddr);
		BPF_CORE_READ_INTO((__u32 *)e->daddr, sk, __sk_common.skc_daddr);
	}
}

static __always_inline void read_tcp(const struct sock *sk, struct tl_net_event *e)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;

	e->srtt_us = BPF_CORE_READ(tp, srtt_us) >> 3;  /* kept <<3 by the kernel */
	e->snd_cwnd = BPF_CORE_READ(tp, snd_cwnd);
	e->snd_wnd = BPF_CORE_READ(tp, snd_wnd);
	e->rcv_wnd = BPF_CORE_READ(tp, rcv_wnd);
	e->total_retrans = BPF_CORE_READ(tp, total_retrans);
	e->retrans_out = BPF_CORE_READ(tp, retrans_out);
}

static __always_inline void flush(struct tl_net_event *v)
{
	struct tl_net_event *e = tl_reserve(&net_ring, TL_RING_NET, sizeof(*e));

	if (!e)
		return;
	__builtin_memcpy(e, v, sizeof(*e));
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/* One record about a known connection, from any context. */
static __always_inline struct tl_net_event *conn_event(const struct sock *sk, struct net_sk *s, __u8 kind,
							 __u64 now)
{
	struct tl_net_event *e = tl_reserve(&net_ring, TL_RING_NET, sizeof(*e));

	if (!e)
		return NULL;
	__builtin_memset(e, 0, sizeof(*e));
	e->ts = e->end_ts = now;
	e->sk = (__u64)sk;
	e->tid = s->tid;
	e->tgid = s->tgid;
	e->kind = kind;
	e->cpu = bpf_get_smp_processor_id();
	e->newstate = BPF_CORE_READ(sk, __sk_common.skc_state);
	read_addrs(sk, e);
	return e;
}

/* The connection's RTT, congestion and receive windows, sampled by a call of
 * a recorded thread (at most one per connection per TL_NET_BUCKET_NS): no
 * probe on every received segment (tcp_probe, most of this family's cost
 * when it had one), and idle connections have nothing new to show. */
static __always_inline void rtt_sample(struct sock *sk, struct net_sk *s, __u64 now)
{
	s->rtt_ts = now;  /* a race between CPUs costs one extra sample */
	struct tl_net_event *e = conn_event(sk, s, TL_NET_RTT, now);
	if (!e)
		return;
	read_tcp(sk, e);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

static __always_inline void io_init(struct tl_net_event *v, struct sock *sk, __u64 id, __u64 now)
{
	__builtin_memset(v, 0, sizeof(*v));
	v->ts = now;
	v->sk = (__u64)sk;
	v->tid = (__u32)id;
	v->tgid = id >> 32;
	v->kind = TL_NET_IO;
	read_addrs(sk, v);
}

/* The counts of this (socket, thread) pair, made on its first call: a free
 * slot of the socket's net_sk and a fresh net_io entry, else net_io_more. */
static __always_inline struct tl_net_event *io_claim(struct sock *sk, struct net_sk *s, __u64 id, __u64 now)
{
	__u32 tid = (__u32)id, zero = 0, i;
	struct tl_net_event *v;

	for (i = 0; i < NET_SLOTS; i++) {
		if (s->user[i] || __sync_val_compare_and_swap(&s->user[i], 0, tid) != 0)
			continue;
		/* user[i] is ours: only this thread reads slot[i] */
		__u64 *used = bpf_map_lookup_elem(&net_io_used, &zero);
		if (!used)
			break;
		__u32 n = __sync_fetch_and_add(used, 1);
		v = bpf_map_lookup_elem(&net_io, &n);
		if (!v)
			break;  /* all handed out: user[i] stays ours, its counts go to net_io_more */
		io_init(v, sk, id, now);
		s->slot[i] = n + 1;
		return v;
	}
	struct net_io_key key = { .sk = (__u64)sk, .tid = tid };
	v = bpf_map_lookup_elem(&net_io_more, &key);
	if (v)
		return v;
	struct tl_net_event z;
	io_init(&z, sk, id, now);
	bpf_map_update_elem(&net_io_more, &key, &z, BPF_ANY);
	return bpf_map_lookup_elem(&net_io_more, &key);
}

/* A socket's net_sk, made when a recorded thread first touches it. */
static __always_inline struct net_sk *sk_claim(struct sock *sk, __u32 tid)
{
	if (!tl_is_tracked(tid))
		return NULL;
	return bpf_sk_storage_get(&net_sks, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
}

/* A receive by a tracked thread returned: one record if the syscall it ends
 * began at least recv_min_ns ago (a blocking wait: non-blocking calls and
 * short waits give none). */
static __always_inline void recv_wait(struct sock *sk, struct net_sk *s, int ret, int flags, __u64 id, __u64 now)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct net_recv_entry *r = bpf_task_storage_get(&net_recv_entries, task, NULL, 0);

	if (!r || !r->ts)
		return;
	__u64 start = r->ts;
	__u32 nr = r->nr;
	r->ts = 0;
	/* The kernel passes MSG_DONTWAIT for a socket whose file is O_NONBLOCK
	 * (Gloo's device threads, NCCL's socket transport, asyncio): such a call
	 * never waits, even when copying megabytes takes milliseconds. */
	if ((flags & MSG_DONTWAIT) || now - start < recv_min_ns)
		return;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (BPF_CORE_READ(regs, orig_ax) != nr)
		return;  /* an entry left by an earlier call that never got here */
	struct tl_net_event *e = conn_event(sk, s, TL_NET_RECV_WAIT, now);
	if (!e)
		return;
	e->ts = start;
	e->tid = (__u32)id;
	e->tgid = id >> 32;
	e->rx_calls = 1;
	if (ret > 0)
		e->rx_bytes = ret;
	else if (ret < 0)
		e->errors = -ret;
	e->msg_flags = flags;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/* Cheapest test first: a socket no recorded thread touched has no net_sk (no
 * map lookup); a known pair finds its counts at an array index. */
static __always_inline int on_io(struct sock *sk, int ret, int flags, bool tx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct tl_net_event *v = NULL;

	if (!sk)
		return 0;
	struct net_sk *s = bpf_sk_storage_get(&net_sks, sk, NULL, 0);
	if (s) {
		if (s->flags & NET_SK_IGNORED)
			return 0;
		__u32 n = 0;
		if (s->user[0] == tid)
			n = s->slot[0];
		else if (s->user[1] == tid)
			n = s->slot[1];
		if (n) {
			n -= 1;
			v = bpf_map_lookup_elem(&net_io, &n);
		}
	}
	__u64 now;
	if (!v) {
		/* a new pair, an untracked thread, or a pair in net_io_more */
		if (!s) {
			s = sk_claim(sk, tid);
			if (!s)
				return 0;
			__u16 family = sk->__sk_common.skc_family;
			if (family != AF_INET && family != AF_INET6) {
				s->flags |= NET_SK_IGNORED;
				return 0;
			}
			if (sk->sk_protocol == IPPROTO_TCP && sk->sk_type == SOCK_STREAM)
				s->flags |= NET_SK_TCP;
		} else if (!tl_is_tracked(tid)) {
			return 0;
		}
		now = bpf_ktime_get_boot_ns();  /* not before: other threads' calls need no time */
		v = io_claim(sk, s, id, now);  /* a fresh pair (this bucket), or one counting in net_io_more */
		if (!v)
			return 0;
	} else {
		now = bpf_ktime_get_boot_ns();
	}
	/* every pair, net_io_more's too, goes to the ring bucket by bucket */
	if (now / TL_NET_BUCKET_NS != v->ts / TL_NET_BUCKET_NS) {
		if (v->tx_calls || v->rx_calls)
			flush(v);
		v->tx_bytes = v->rx_bytes = 0;
		v->tx_calls = v->rx_calls = v->errors = v->eagain = 0;
		v->ts = now;
	}
	s->tid = tid;
	s->tgid = id >> 32;
	if (tx) {
		v->tx_calls++;
		if (ret > 0)
			v->tx_bytes += ret;
	} else {
		v->rx_calls++;
		if (ret > 0 && !(flags & MSG_PEEK))
			v->rx_bytes += ret;
	}
	if (ret == -EAGAIN)
		v->eagain++;
	else if (ret < 0)
		v->errors++;
	v->end_ts = now;
	v->cpu = bpf_get_smp_processor_id();
	if ((s->flags & NET_SK_TCP) && now - s->rtt_ts >= TL_NET_BUCKET_NS)
		rtt_sample(sk, s, now);
	if (!tx)
		recv_wait(sk, s, ret, flags, id, now);
	return 0;
}

/* The start of a receive syscall of a tracked thread.  These tracepoints fire
 * for every recvfrom/recvmsg on the machine: a thread that has its entry
 * already (it was tracked at an earlier receive) finds it through the task,
 * others stop at the tracked lookup.  MSG_DONTWAIT calls cannot block: no
 * entry.  Calls on an O_NONBLOCK file cannot either, but keep one: resolving
 * fd -> file here (task->files->fdt->fd[fd]->f_flags) measured ~80 ns a run
 * more in the gloo bench than the task storage and clock it saves, and an
 * empty program here costs ~85% of this one (docs/benchmarks.md).  Their
 * receive carries MSG_DONTWAIT (the kernel adds it), which recv_wait drops.
 * recvmmsg (several messages per call, each its own wait) and read() on a
 * socket (not how Gloo or NCCL receive) are left out. */
static __always_inline int recv_enter(long nr, __u64 flags)
{
	if (flags & MSG_DONTWAIT)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct net_recv_entry *r = NULL;

	if (task->bpf_storage)  /* most threads on the machine have no BPF storage at all: no helper call */
		r = bpf_task_storage_get(&net_recv_entries, task, NULL, 0);
	if (!r) {
		if (!tl_is_tracked((__u32)bpf_get_current_pid_tgid()))
			return 0;
		r = bpf_task_storage_get(&net_recv_entries, task, NULL, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!r)
			return 0;
	}
	r->ts = bpf_ktime_get_boot_ns();
	r->nr = nr;
	return 0;
}

SEC("tp/syscalls/sys_enter_recvfrom")
int tl_net_recvfrom(struct trace_event_raw_sys_enter *ctx)
{
	return recv_enter(ctx->id, ctx->args[3]);  /* fd, buf, len, flags, addr, addrlen */
}

SEC("tp/syscalls/sys_enter_recvmsg")
int tl_net_recvmsg(struct trace_event_raw_sys_enter *ctx)
{
	return recv_enter(ctx->id, ctx->args[2]);  /* fd, msg, flags */
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tl_net_send, struct sock *sk, int ret, int flags)
{
	return on_io(sk, ret, flags, true);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(tl_net_recv, struct sock *sk, int ret, int flags)
{
	return on_io(sk, ret, flags, false);
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tl_net_retransmit, struct sock *sk, const struct sk_buff *skb)
{
	struct net_sk *s = bpf_sk_storage_get(&net_sks, sk, NULL, 0);

	if (!s || !s->tid)
		return 0;
	struct tl_net_event *e = conn_event(sk, s, TL_NET_RETRANSMIT, bpf_ktime_get_boot_ns());
	if (!e)
		return 0;
	read_tcp(sk, e);
	e->oldstate = BPF_CORE_READ_BITFIELD_PROBED((const struct inet_connection_sock *)sk, icsk_ca_state);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(tl_net_state, struct sock *sk, const int oldstate, const int newstate)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct net_sk *s = bpf_sk_storage_get(&net_sks, sk, NULL, 0);

	if (!s || !s->tid) {
		/* connect() or listen() by a tracked thread: a new connection to
		 * follow (accepted ones join at their first call).  Only those two,
		 * which run in the caller's context: other changes (a handshake
		 * completing, a FIN arriving) run in softirq on whatever thread
		 * the CPU was on, often a tracked sender on the same host, which
		 * would claim another process's socket. */
		if (newstate != TCP_SYN_SENT && newstate != TCP_LISTEN)
			return 0;
		s = sk_claim(sk, (__u32)id);
		if (!s)
			return 0;
		s->tid = (__u32)id;
		s->tgid = id >> 32;
	}
	struct tl_net_event *e = conn_event(sk, s, TL_NET_STATE, bpf_ktime_get_boot_ns());
	if (e) {
		e->oldstate = oldstate;
		e->newstate = newstate;
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	}
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(tl_net_softirq_entry, unsigned int vec)
{
	__u32 zero = 0;
	struct net_cpu *c;

	if (vec != NET_TX_VEC && vec != NET_RX_VEC)
		return 0;
	c = bpf_map_lookup_elem(&net_cpus, &zero);
	if (c) {
		c->start = bpf_ktime_get_boot_ns();
		c->vec = vec;
	}
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(tl_net_softirq_exit, unsigned int vec)
{
	__u32 zero = 0;
	struct net_cpu *c;

	if (vec != NET_TX_VEC && vec != NET_RX_VEC)
		return 0;
	c = bpf_map_lookup_elem(&net_cpus, &zero);
	if (!c || !c->start || c->vec != vec)
		return 0;
	__u64 now = bpf_ktime_get_boot_ns(), d = now - c->start;
	struct tl_net_event *a = &c->acc;

	c->start = 0;
	if (a->ts && now / TL_NET_BUCKET_NS != a->ts / TL_NET_BUCKET_NS) {
		flush(a);
		a->tx_bytes = a->rx_bytes = 0;
		a->tx_calls = a->rx_calls = 0;
		a->ts = 0;
	}
	if (!a->ts) {
		a->ts = now - d;
		a->kind = TL_NET_SOFTIRQ;
		a->cpu = bpf_get_smp_processor_id();
	}
	if (vec == NET_TX_VEC) {
		a->tx_bytes += d;
		a->tx_calls++;
	} else {
		a->rx_bytes += d;
		a->rx_calls++;
	}
	a->end_ts = now;
	return 0;
}
