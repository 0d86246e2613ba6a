/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Maps and helpers shared by every timeline BPF object.
 *
 * Each object declares these maps with identical definitions; the loader
 * creates them once (in proc.bpf.o) and makes every other object reuse the
 * same fds (bpf_map__reuse_fd), so all programs see one tracked set and one
 * drop counter array.
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

/* Records lost because a ring buffer was full, per CPU, indexed by ring id. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TL_MAX_RINGS);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

static __always_inline bool tl_is_tracked(__u32 tid)
{
	return tid != 0 && bpf_map_lookup_elem(&tracked, &tid) != NULL;
}

static __always_inline void tl_count_drop(__u32 ring)
{
	__u64 *n = bpf_map_lookup_elem(&drops, &ring);

	if (n)
		*n += 1; /* per-CPU slot: no atomics needed */
}

#endif /* TIMELINE_TRACKING_BPF_H */
