// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Memory-pressure stalls of the recorded threads, and OOM kills.
 *
 * Direct reclaim (the machine is short of memory), memcg reclaim (the
 * thread's cgroup is at its limit or memory.high) and compaction run in the
 * allocating thread, between a begin and an end tracepoint: the begin is
 * kept per thread and kind, the end writes one record.  Compaction's
 * tracepoints also fire in kcompactd, which is never tracked: what is
 * recorded is the thread's own (direct) compaction.  These fire only under
 * memory pressure, so they cost nothing in a healthy run.
 *
 * mark_victim fires once per OOM kill, in the task whose allocation invoked
 * the killer; it is recorded whoever the victim is (rare, and a kill of a
 * process outside the tree still explains a stall inside it), flagged when
 * the victim or the killer belongs to the tree.
 */
#include "tracking.bpf.h"
#include "mem_records.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct tl_mem_event tl_mem_event_layout = {};

struct mem_stall {
	__u64 ts;
	__u64 gfp;
	__s32 order;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} mem_ring SEC(".maps");

/* (tid << 8 | kind) -> the stall's begin.  LRU: a begin whose end we never
 * see (attached mid-stall is harmless; detached mid-stall leaves one) must
 * not hold a slot forever. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct mem_stall);
} mem_stalls SEC(".maps");

static __always_inline int stall_begin(__u8 kind, __s32 order, __u64 gfp)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (!tl_is_tracked(tid))
		return 0;
	__u64 key = (__u64)tid << 8 | kind;
	struct mem_stall s = { .ts = bpf_ktime_get_boot_ns(), .gfp = gfp, .order = order };

	bpf_map_update_elem(&mem_stalls, &key, &s, BPF_ANY);
	return 0;
}

static __always_inline int stall_end(__u8 kind, __u64 nr)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 key = (__u64)(__u32)id << 8 | kind;
	struct mem_stall *s = bpf_map_lookup_elem(&mem_stalls, &key);

	if (!s)
		return 0;
	struct tl_mem_event *e = tl_reserve(&mem_ring, TL_RING_MEM, sizeof(*e));

	if (e) {
		struct task_struct *t = bpf_get_current_task_btf();

		e->ts = s->ts;
		e->end_ts = bpf_ktime_get_boot_ns();
		e->nr = nr;
		e->gfp = s->gfp;
		e->maj_flt = BPF_CORE_READ(t, maj_flt);
		e->min_flt = BPF_CORE_READ(t, min_flt);
		e->tid = (__u32)id;
		e->tgid = id >> 32;
		e->by_tid = 0;
		e->by_tgid = 0;
		e->order = s->order;
		e->cpu = bpf_get_smp_processor_id();
		e->kind = kind;
		e->flags = 0;
		bpf_get_current_comm(e->comm, sizeof(e->comm));
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	}
	bpf_map_delete_elem(&mem_stalls, &key);
	return 0;
}

SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(tl_mem_reclaim_begin, int order, gfp_t gfp)
{
	return stall_begin(TL_MEM_DIRECT_RECLAIM, order, gfp);
}

SEC("tp_btf/mm_vmscan_direct_reclaim_end")
int BPF_PROG(tl_mem_reclaim_end, unsigned long nr_reclaimed)
{
	return stall_end(TL_MEM_DIRECT_RECLAIM, nr_reclaimed);
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(tl_mem_memcg_begin, int order, gfp_t gfp)
{
	return stall_begin(TL_MEM_MEMCG_RECLAIM, order, gfp);
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(tl_mem_memcg_end, unsigned long nr_reclaimed)
{
	return stall_end(TL_MEM_MEMCG_RECLAIM, nr_reclaimed);
}

SEC("tp_btf/mm_compaction_begin")
int BPF_PROG(tl_mem_compact_begin, struct compact_control *cc)
{
	return stall_begin(TL_MEM_COMPACTION, BPF_CORE_READ(cc, order), BPF_CORE_READ(cc, gfp_mask));
}

SEC("tp_btf/mm_compaction_end")
int BPF_PROG(tl_mem_compact_end, struct compact_control *cc, unsigned long zone_start, unsigned long zone_end,
	     bool sync, int status)
{
	return stall_end(TL_MEM_COMPACTION, (__u64)(__s64)status);
}

SEC("tp_btf/mark_victim")
int BPF_PROG(tl_mem_oom_victim, struct task_struct *victim)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = BPF_CORE_READ(victim, pid);
	__u8 flags = 0;

	if (tl_is_tracked(tid))
		flags |= TL_MF_VICTIM_TRACKED;
	if (tl_is_tracked((__u32)id))
		flags |= TL_MF_KILLER_TRACKED;
	struct tl_mem_event *e = tl_reserve(&mem_ring, TL_RING_MEM, sizeof(*e));

	if (!e)
		return 0;
	struct mm_struct *mm = BPF_CORE_READ(victim, mm);

	e->ts = bpf_ktime_get_boot_ns();
	e->end_ts = e->ts;
	/* rss_stat are percpu counters: their shared count is within a few
	 * pages per CPU of the sum, close enough to say how big the victim was */
	e->nr = 0;
	e->gfp = 0;
	if (mm) {
		e->nr = BPF_CORE_READ(mm, rss_stat[MM_FILEPAGES].count) + BPF_CORE_READ(mm, rss_stat[MM_ANONPAGES].count)
			+ BPF_CORE_READ(mm, rss_stat[MM_SHMEMPAGES].count);
		e->gfp = BPF_CORE_READ(mm, total_vm);
	}
	e->maj_flt = BPF_CORE_READ(victim, maj_flt);
	e->min_flt = BPF_CORE_READ(victim, min_flt);
	e->tid = tid;
	e->tgid = BPF_CORE_READ(victim, tgid);
	e->by_tid = (__u32)id;
	e->by_tgid = id >> 32;
	e->order = BPF_CORE_READ(victim, signal, oom_score_adj);
	e->cpu = bpf_get_smp_processor_id();
	e->kind = TL_MEM_OOM_KILL;
	e->flags = flags;
	if (bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), victim->comm) < 0)
		e->comm[0] = 0;
	/* rare and worth seeing at once: wake the reader */
	bpf_ringbuf_submit(e, 0);
	return 0;
}
