/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Maps and helpers shared by every timeline BPF object.
 *
 * Each object declares these maps with identical definitions; the loader
 * creates them once (in proc.bpf.o) and makes every other object reuse the
 * same fds (bpf_map__reuse_fd), so all programs see one tracked set and one
 * set of loss counters.
 */
#ifndef TIMELINE_TRACKING_BPF_H
#define TIMELINE_TRACKING_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "events.h"

/* sched_switch prev_state bits (as ftrace reports them) of a task that exited. */
#define TL_STATE_EXIT_DEAD   0x10
#define TL_STATE_EXIT_ZOMBIE 0x20

struct tl_task {
	__u32 tgid;
	__u32 flags;
};

/* tid -> task info for every task of the recorded process tree. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct tl_task);
} tracked SEC(".maps");

/* Per-CPU loss counters, TL_DROP_* group + ring id (events.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TL_DROP_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* What a family's probe program hands to the program it tail-calls at the
 * same hit (a hook: cuda.bpf.c tl_call_hooks), so that the hook does not
 * fetch it again (each helper call costs 20-40 ns here).  Per CPU: a tail
 * call runs at once on the same CPU.  A uprobe program may be preempted,
 * though, and another task's program may overwrite the slot meanwhile:
 * `check` ties the fields to each other and to the thread, and a hook that
 * finds them not its own fetches them itself. */
struct tl_hook_args {
	__u64 ts;          /* bpf_ktime_get_boot_ns() at the hit */
	__u64 cookie;      /* the probe's attach cookie */
	__u64 check;       /* tl_hook_check(ts, cookie, tid) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tl_hook_args);
} hook_args SEC(".maps");

static __always_inline __u64 tl_hook_check(__u64 ts, __u64 cookie, __u32 tid)
{
	return (ts ^ ((__u64)tid << 32)) * 0x9E3779B97F4A7C15ULL ^ cookie;
}

/* Before a tail call to a hook. */
static __always_inline void tl_hook_pass(__u64 ts, __u64 cookie, __u32 tid)
{
	__u32 zero = 0;
	struct tl_hook_args *a = bpf_map_lookup_elem(&hook_args, &zero);

	if (a) {
		a->ts = ts;
		a->cookie = cookie;
		a->check = tl_hook_check(ts, cookie, tid);
	}
}

/* In a hook: what the program that tail-called it passed, if this thread's. */
static __always_inline bool tl_hook_take(__u32 tid, __u64 *ts, __u64 *cookie)
{
	__u32 zero = 0;
	struct tl_hook_args *a = bpf_map_lookup_elem(&hook_args, &zero);

	if (!a)
		return false;
	*ts = a->ts;
	*cookie = a->cookie;
	return *ts && a->check == tl_hook_check(*ts, *cookie, tid);
}

static __always_inline bool tl_is_tracked(__u32 tid)
{
	return tid != 0 && bpf_map_lookup_elem(&tracked, &tid) != NULL;
}

/* Per-CPU slots: no atomics needed. */
static __always_inline void tl_drop_count(__u32 slot)
{
	__u64 *n = bpf_map_lookup_elem(&drops, &slot);

	if (n)
		*n += 1;
}

static __always_inline void tl_drop_max(__u32 slot, __u64 v)
{
	__u64 *n = bpf_map_lookup_elem(&drops, &slot);

	if (n && v > *n)
		*n = v;
}

/* After a failed reserve: did the ring have room for a record of `size`?
 * The kernel refuses when producer + len - consumer > ring size - 1, len
 * being the record with its 8-byte header, padded to 8. */
static __always_inline bool tl_ring_has_room(void *ring, __u64 size, __u64 *pending)
{
	__u64 len = (size + 8 + 7) & ~7ULL;

	*pending = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA);
	return *pending + len < bpf_ringbuf_query(ring, BPF_RB_RING_SIZE);
}

/*
 * bpf_ringbuf_reserve, counting every record that cannot be queued by cause
 * (TL_DROP_*).  A reserve refused while the ring has room is retried once:
 * that is not a full ring but the reserve path itself (the ring lock giving
 * up, or the consumer position read while user space wrote it); should the
 * retry succeed only TL_DROP_RETRIED counts it.  The fast path is one call.
 */
static __always_inline void *tl_reserve(void *ring, __u32 ring_id, __u64 size)
{
	void *e = bpf_ringbuf_reserve(ring, size, 0);
	__u64 pending;

	if (e)
		return e;
	if (!tl_ring_has_room(ring, size, &pending)) {
		tl_drop_count(TL_DROP_FULL + ring_id);
		return NULL;
	}
	e = bpf_ringbuf_reserve(ring, size, 0);
	if (e) {
		tl_drop_count(TL_DROP_RETRIED + ring_id);
		return e;
	}
	if (!tl_ring_has_room(ring, size, &pending)) {
		tl_drop_count(TL_DROP_FULL + ring_id);
		return NULL;
	}
	tl_drop_count(TL_DROP_REFUSED + ring_id);
	tl_drop_max(TL_DROP_FILL + ring_id, pending);
	return NULL;
}

#endif /* TIMELINE_TRACKING_BPF_H */
