/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Family sched (timeline/core_families.py, timeline/bpf/sched.bpf.c): the
 * records of its ring.  Mirrored once by timeline/sched_records.py;
 * tests/unit/test_layout.py checks both against the BTF of sched.bpf.o.
 * Included after vmlinux.h (tracking.bpf.h), which defines the __u* types.
 */
#ifndef TIMELINE_SCHED_RECORDS_H
#define TIMELINE_SCHED_RECORDS_H

#define TL_RING_SCHED 1

/* kinds */
#define TL_SCHED_SWITCH 1
#define TL_SCHED_WAKING 2

/* flags */
#define TL_SF_PREV_TRACKED 1  /* switch: prev task is in the tracked tree */
#define TL_SF_NEXT_TRACKED 2  /* switch: next task is in the tracked tree */
#define TL_SF_WAKEUP_NEW   4  /* waking: from sched_wakeup_new (fresh task) */
#define TL_SF_LEFT_IDLE    8  /* switch: neither task tracked; the CPU leaves idle
                                 (prev is the idle task) for an untracked task,
                                 after a recorded switch had left it idle */

struct tl_sched_event {
	__u64 ts;          /* bpf_ktime_get_boot_ns() */
	__u32 tid;         /* switch: prev task;  waking: the waker (current) */
	__u32 target_tid;  /* switch: next task;  waking: the woken task */
	__s64 arg;         /* switch: prev_state as ftrace reports it; waking: target cpu */
	__s32 prio;        /* switch: next prio;  waking: woken task prio */
	__u16 cpu;
	__u8 kind;         /* TL_SCHED_* */
	__u8 flags;        /* TL_SF_* */
};                     /* 32 bytes */

#endif /* TIMELINE_SCHED_RECORDS_H */
