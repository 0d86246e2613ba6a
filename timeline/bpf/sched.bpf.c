// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Scheduler events for the tracked tree: context switches and wakeups. */
#include "tracking.bpf.h"
#include "sched_records.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Puts the record layout into the object's BTF, where the loader and the
 * layout test read it (types used only through locals are not emitted). */
const volatile struct tl_sched_event tl_sched_event_layout = {};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} sched_ring SEC(".maps");

/* Per CPU: 1 while a recorded switch has left the CPU idle and no switch
 * since has been recorded there.  The first untracked task the CPU then
 * runs is recorded once (TL_SF_LEFT_IDLE), so the converter can tell idle
 * time (drawn empty) from time something outside the tree held the CPU,
 * at the cost of at most one record per recorded switch to idle. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} idle_watch SEC(".maps");

static __always_inline int emit(__u8 kind, __u8 flags, __u32 tid, __u32 target,
				__s64 arg, __s32 prio)
{
	struct tl_sched_event *e = tl_reserve(&sched_ring, TL_RING_SCHED, sizeof(*e));

	if (!e)
		return 0;
	e->ts = bpf_ktime_get_boot_ns();
	e->tid = tid;
	e->target_tid = target;
	e->arg = arg;
	e->prio = prio;
	e->cpu = bpf_get_smp_processor_id();
	e->kind = kind;
	e->flags = flags;
	/* No wakeup: the recorder polls, so tracing a switch never causes one. */
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("tp/sched/sched_switch")
int tl_switch(struct trace_event_raw_sched_switch *ctx)
{
	/* Read ctx fields once, up front: the verifier rejects ctx accesses
	 * through a computed pointer, which clang emits for re-reads. */
	__u32 prev = ctx->prev_pid, next = ctx->next_pid;
	__s64 state = ctx->prev_state;
	__s32 prio = ctx->next_prio;
	__u8 flags = 0;
	__u32 zero = 0, *watch;

	if (tl_is_tracked(prev))
		flags |= TL_SF_PREV_TRACKED;
	if (tl_is_tracked(next))
		flags |= TL_SF_NEXT_TRACKED;
	if (!flags) {
		/* Only idle -> untracked can end a watch: other switches cost no lookup. */
		if (prev != 0 || next == 0)
			return 0;
		watch = bpf_map_lookup_elem(&idle_watch, &zero);
		if (!watch || !*watch)
			return 0;
		*watch = 0;
		return emit(TL_SCHED_SWITCH, TL_SF_LEFT_IDLE, prev, next, state, prio);
	}
	watch = bpf_map_lookup_elem(&idle_watch, &zero);
	if (watch)
		*watch = next == 0;
	emit(TL_SCHED_SWITCH, flags, prev, next, state, prio);
	/* An exiting task's final switch reports X or Z: it never runs again. */
	if ((flags & TL_SF_PREV_TRACKED) && (state & (TL_STATE_EXIT_DEAD | TL_STATE_EXIT_ZOMBIE)))
		bpf_map_delete_elem(&tracked, &prev);
	return 0;
}

static __always_inline int on_wake(struct trace_event_raw_sched_wakeup_template *ctx, __u8 flags)
{
	__u32 pid = ctx->pid;
	__s32 prio = ctx->prio, target_cpu = ctx->target_cpu;

	if (!tl_is_tracked(pid))
		return 0;
	return emit(TL_SCHED_WAKING, flags, (__u32)bpf_get_current_pid_tgid(), pid,
		    target_cpu, prio);
}

SEC("tp/sched/sched_waking")
int tl_waking(struct trace_event_raw_sched_wakeup_template *ctx)
{
	return on_wake(ctx, 0);
}

SEC("tp/sched/sched_wakeup_new")
int tl_wakeup_new(struct trace_event_raw_sched_wakeup_template *ctx)
{
	return on_wake(ctx, TL_SF_WAKEUP_NEW);
}
