// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Process-tree tracking: fork/exec/exit/rename of the recorded tree. */
#include "tracking.bpf.h"
#include "proc_records.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Puts the record layout into the object's BTF, where the loader and the
 * layout test read it (types used only through locals are not emitted). */
const volatile struct tl_proc_event tl_proc_event_layout = {};

/* The recorder's own tgid: a process it forks while `launch_armed` is set is
 * the launched target and becomes the root of the tracked tree. */
const volatile __u32 launcher_tgid = 0;
/* With sched loaded, an exiting task stays tracked until its final switch-out
 * (sched.bpf.c untracks it there) so its last slice ends exactly. */
const volatile bool untrack_on_switch = false;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} launch_armed SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} proc_ring SEC(".maps");

static __always_inline struct tl_proc_event *proc_reserve(__u8 kind)
{
	struct tl_proc_event *e = tl_reserve(&proc_ring, TL_RING_PROC, sizeof(*e));

	if (!e)
		return NULL;
	e->ts = bpf_ktime_get_boot_ns();
	e->cpu = bpf_get_smp_processor_id();
	e->kind = kind;
	e->flags = 0;
	e->exit_code = 0;
	e->data_len = 0;
	e->child_tid = 0;
	e->child_tgid = 0;
	e->pad = 0;
	return e;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(tl_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptid = parent->pid, ptgid = parent->tgid;
	__u32 ctid = child->pid, ctgid = child->tgid;
	__u8 flags = 0;
	struct tl_task t = { .tgid = ctgid };

	if (!tl_is_tracked(ptid) && !tl_is_tracked(ptgid)) {
		__u32 zero = 0, *armed;

		/* Not part of the tree: only the recorder's launch of the
		 * target (a new process, not a recorder thread) gets in. */
		if (ptgid != launcher_tgid || ctgid == ptgid)
			return 0;
		armed = bpf_map_lookup_elem(&launch_armed, &zero);
		if (!armed || !*armed)
			return 0;
		flags |= TL_PF_LAUNCHED;
	}
	if (ctgid == ptgid)
		flags |= TL_PF_THREAD;
	bpf_map_update_elem(&tracked, &ctid, &t, BPF_ANY);

	struct tl_proc_event *e = proc_reserve(TL_PROC_FORK);
	if (!e)
		return 0;
	e->tid = ptid;
	e->tgid = ptgid;
	e->child_tid = ctid;
	e->child_tgid = ctgid;
	e->flags = flags;
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), child->comm);
	bpf_probe_read_kernel_str(e->old_comm, sizeof(e->old_comm), parent->comm);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("tp/sched/sched_process_exec")
int tl_exec(struct trace_event_raw_sched_process_exec *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;

	if (!tl_is_tracked(tid))
		return 0;
	struct tl_proc_event *e = proc_reserve(TL_PROC_EXEC);
	if (!e)
		return 0;
	e->tid = tid;
	e->tgid = id >> 32;
	e->child_tid = ctx->old_pid;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->old_comm[0] = 0;

	/* argv lives in the new mm between arg_start and arg_end. */
	struct task_struct *task = bpf_get_current_task_btf();
	unsigned long start = BPF_CORE_READ(task, mm, arg_start);
	unsigned long end = BPF_CORE_READ(task, mm, arg_end);
	__u64 len = end > start ? end - start : 0;
	long err;

	/* Two calls so the verifier sees a constant or a masked length. */
	if (len >= TL_PROC_DATA_LEN) {
		len = TL_PROC_DATA_LEN;
		err = bpf_probe_read_user(e->data, TL_PROC_DATA_LEN, (void *)start);
	} else {
		len &= TL_PROC_DATA_LEN - 1;
		err = len ? bpf_probe_read_user(e->data, len, (void *)start) : -1;
	}
	if (!err)
		e->data_len = len;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("tp/sched/sched_process_exit")
int tl_exit(struct trace_event_raw_sched_process_exit *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;

	if (!tl_is_tracked(tid))
		return 0;
	if (!untrack_on_switch)
		bpf_map_delete_elem(&tracked, &tid);
	struct tl_proc_event *e = proc_reserve(TL_PROC_EXIT);
	if (!e)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();

	e->tid = tid;
	e->tgid = id >> 32;
	e->exit_code = BPF_CORE_READ(task, exit_code);
	e->flags = ctx->group_dead ? TL_PF_GROUP_DEAD : 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->old_comm[0] = 0;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("tp/task/task_rename")
int tl_rename(struct trace_event_raw_task_rename *ctx)
{
	__u32 tid = ctx->pid;
	struct tl_task *t = bpf_map_lookup_elem(&tracked, &tid);

	if (!tid || !t)
		return 0;
	struct tl_proc_event *e = proc_reserve(TL_PROC_RENAME);
	if (!e)
		return 0;
	e->tid = tid;
	e->tgid = t->tgid;
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), ctx->newcomm);
	bpf_probe_read_kernel_str(e->old_comm, sizeof(e->old_comm), ctx->oldcomm);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}
