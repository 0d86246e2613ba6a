// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Lifetime totals of every tracked thread, taken as it exits.
 *
 * The counters family samples /proc (and NVML) from user space; a thread or
 * process that lives between two samples, or whose last interval would be
 * lost when its /proc entry vanishes, still gets exact totals here.  Fires
 * only on exits, so it costs nothing while the tree runs.
 */
#include "tracking.bpf.h"
#include "counters_records.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct tl_counters_event tl_counters_event_layout = {};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} counters_ring SEC(".maps");

SEC("tp/sched/sched_process_exit")
int tl_cnt_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;

	if (!tl_is_tracked(tid))
		return 0;
	struct tl_counters_event *e = tl_reserve(&counters_ring, TL_RING_COUNTERS, sizeof(*e));
	if (!e)
		return 0;
	struct task_struct *t = bpf_get_current_task_btf();

	e->ts = bpf_ktime_get_boot_ns();
	e->utime_ns = BPF_CORE_READ(t, utime);
	e->stime_ns = BPF_CORE_READ(t, stime);
	e->min_flt = BPF_CORE_READ(t, min_flt);
	e->maj_flt = BPF_CORE_READ(t, maj_flt);
	e->nvcsw = BPF_CORE_READ(t, nvcsw);
	e->nivcsw = BPF_CORE_READ(t, nivcsw);
	e->read_bytes = 0;
	e->write_bytes = 0;
	if (bpf_core_field_exists(t->ioac)) {
		e->read_bytes = BPF_CORE_READ(t, ioac.read_bytes);
		e->write_bytes = BPF_CORE_READ(t, ioac.write_bytes);
	}
	e->tid = tid;
	e->tgid = id >> 32;
	e->cpu = bpf_get_smp_processor_id();
	e->kind = TL_COUNTERS_EXIT;
	e->flags = 0;
	e->pad = 0;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}
