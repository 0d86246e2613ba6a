/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Family mem (timeline/memory/family.py, mem.bpf.c beside this file):
 * memory-pressure stalls of the recorded threads and OOM kills.  Mirrored
 * once by timeline/memory/mem_records.py; tests/unit/test_layout.py checks
 * both against the BTF of mem.bpf.o.  Included after vmlinux.h
 * (tracking.bpf.h), which defines the __u* types.
 */
#ifndef TIMELINE_MEM_RECORDS_H
#define TIMELINE_MEM_RECORDS_H

#define TL_RING_MEM 31

#define TL_MEM_DIRECT_RECLAIM 1  /* a thread reclaimed pages itself (machine short of memory) */
#define TL_MEM_MEMCG_RECLAIM  2  /* ... because its cgroup hit its memory limit / memory.high */
#define TL_MEM_COMPACTION     3  /* a thread compacted memory for a high-order allocation */
#define TL_MEM_OOM_KILL       4  /* the OOM killer chose a victim (any process of the machine) */

#define TL_MF_VICTIM_TRACKED  1  /* oom: the victim is a thread of the recorded tree */
#define TL_MF_KILLER_TRACKED  2  /* oom: the task whose allocation invoked the killer is */

struct tl_mem_event {
	__u64 ts;          /* stall start; oom: the kill */
	__u64 end_ts;      /* stall end; oom: = ts */
	__u64 nr;          /* reclaim: pages reclaimed; compaction: its result (enum compact_result);
	                      oom: the victim's resident pages (file + anon + shmem, approximate) */
	__u64 gfp;         /* reclaim, compaction: the allocation's gfp mask; oom: the victim's total_vm pages */
	__u64 maj_flt;     /* the stalled thread's major faults so far; oom: the victim's */
	__u64 min_flt;
	__u32 tid;         /* the stalled thread; oom: the victim */
	__u32 tgid;
	__u32 by_tid;      /* oom: the task that invoked the OOM killer (its allocation failed) */
	__u32 by_tgid;
	__s32 order;       /* allocation order; oom: the victim's oom_score_adj */
	__u16 cpu;
	__u8 kind;         /* TL_MEM_* */
	__u8 flags;        /* TL_MF_* */
	char comm[16];     /* the stalled thread's / the victim's name */
};                     /* 88 bytes */

#endif /* TIMELINE_MEM_RECORDS_H */
