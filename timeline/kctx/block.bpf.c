// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Block requests submitted by the tracked tree, from queue insertion to
 * completion.
 *
 * The submitter is the task in whose context the request is inserted into
 * the queue (or issued directly, without a scheduler).  Completion runs in
 * IRQ context, where "current" means nothing, so requests are paired by
 * their struct request pointer (tp_btf gives it; it is exact where (dev,
 * sector) is not: a front merge moves the sector).  Writeback that kernel
 * threads submit on the tree's behalf is not attributed to it.
 */
#include "tracking.bpf.h"
#include "block_records.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct tl_block_event tl_block_event_layout = {};

struct blk_start {
	__u64 ts;
	__u64 issue_ts;
	__u32 tid;
	__u32 tgid;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 21);
} block_ring SEC(".maps");

/* struct request * -> submitter.  LRU: a request that never completes
 * (device removed) must not hold its slot forever. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct blk_start);
} block_inflight SEC(".maps");

static __always_inline int note(struct request *rq, bool issue)
{
	__u64 key = (__u64)rq, now = bpf_ktime_get_boot_ns();
	struct blk_start *s = bpf_map_lookup_elem(&block_inflight, &key);

	if (s) {
		if (issue && !s->issue_ts)
			s->issue_ts = now;
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;

	/* A request first seen at issue was inserted before we attached, or
	 * bypassed the scheduler: count it from issue, in its issuer. */
	if (!tl_is_tracked(tid))
		return 0;
	struct blk_start v = { .ts = now, .issue_ts = issue ? now : 0, .tid = tid, .tgid = id >> 32 };
	bpf_map_update_elem(&block_inflight, &key, &v, BPF_ANY);
	return 0;
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(tl_blk_insert, struct request *rq)
{
	return note(rq, false);
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(tl_blk_issue, struct request *rq)
{
	return note(rq, true);
}

/* REQ_* flag bits are an enum whose values moved between kernels: CO-RE
 * resolves them against the running kernel. */
static __always_inline __u8 rw_flags(__u32 opf)
{
	__u8 f = 0;

	if (opf & (1u << bpf_core_enum_value(enum req_flag_bits, __REQ_SYNC)))
		f |= TL_BF_SYNC;
	if (opf & (1u << bpf_core_enum_value(enum req_flag_bits, __REQ_META)))
		f |= TL_BF_META;
	if (opf & (1u << bpf_core_enum_value(enum req_flag_bits, __REQ_FUA)))
		f |= TL_BF_FUA;
	if (opf & (1u << bpf_core_enum_value(enum req_flag_bits, __REQ_RAHEAD)))
		f |= TL_BF_RAHEAD;
	if (opf & (1u << bpf_core_enum_value(enum req_flag_bits, __REQ_PREFLUSH)))
		f |= TL_BF_PREFLUSH;
	return f;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(tl_blk_done, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq, now = bpf_ktime_get_boot_ns();
	struct blk_start *s = bpf_map_lookup_elem(&block_inflight, &key);

	if (!s)
		return 0;
	__u32 left = BPF_CORE_READ(rq, __data_len);
	bool partial = nr_bytes < left;
	struct tl_block_event *e = tl_reserve(&block_ring, TL_RING_BLOCK, sizeof(*e));

	if (e) {
		struct gendisk *disk = BPF_CORE_READ(rq, q, disk);
		__u32 opf = BPF_CORE_READ(rq, cmd_flags);

		e->ts = s->ts;
		e->issue_ts = s->issue_ts;
		e->done_ts = now;
		e->sector = BPF_CORE_READ(rq, __sector);
		e->tid = s->tid;
		e->tgid = s->tgid;
		e->dev = disk ? ((__u32)BPF_CORE_READ(disk, major) << 20) | BPF_CORE_READ(disk, first_minor) : 0;
		e->bytes = nr_bytes;
		e->cpu = bpf_get_smp_processor_id();
		e->kind = TL_BLOCK_IO;
		e->flags = rw_flags(opf) | (partial ? TL_BF_PARTIAL : 0);
		e->op = opf & 0xff; /* REQ_OP_MASK */
		e->status = error;
		e->pad = 0;
		if (!disk || bpf_probe_read_kernel_str(e->disk, sizeof(e->disk), disk->disk_name) < 0)
			e->disk[0] = 0;
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	}
	/* A partial completion leaves the rest of the request in flight: its
	 * next record starts where this one ended (same timestamp). */
	if (partial)
		s->ts = now;
	else
		bpf_map_delete_elem(&block_inflight, &key);
	return 0;
}
