/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one definition of every record the BPF programs emit.
 *
 * Each ring buffer carries records of a single fixed size, so user space can
 * decode a whole ring chunk at once with a numpy structured dtype instead of
 * walking variable-length records.  timeline/events.py mirrors these structs;
 * tests/test_layout.py checks both against the BTF of the built objects.
 */
#ifndef TIMELINE_EVENTS_H
#define TIMELINE_EVENTS_H

/* Ring ids: one ring buffer per event family. */
#define TL_RING_SCHED 1
#define TL_RING_PROC  2

/* Index of the per-CPU drop counters (map "drops"), one slot per ring id. */
#define TL_MAX_RINGS 8

/* ---- ring TL_RING_SCHED ---------------------------------------------- */
#define TL_SCHED_SWITCH 1
#define TL_SCHED_WAKING 2

/* flags */
#define TL_SF_PREV_TRACKED 1  /* switch: prev task is in the tracked tree */
#define TL_SF_NEXT_TRACKED 2  /* switch: next task is in the tracked tree */
#define TL_SF_WAKEUP_NEW   4  /* waking: from sched_wakeup_new (fresh task) */

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

/* ---- ring TL_RING_PROC ----------------------------------------------- */
#define TL_PROC_FORK   1
#define TL_PROC_EXEC   2
#define TL_PROC_EXIT   3
#define TL_PROC_RENAME 4

#define TL_PF_THREAD     1  /* fork: child shares the parent's tgid */
#define TL_PF_GROUP_DEAD 2  /* exit: last thread of the process */
#define TL_PF_LAUNCHED   4  /* fork: the recorder's own launch of the target */

#define TL_PROC_DATA_LEN 256

struct tl_proc_event {
	__u64 ts;
	__u32 tid;         /* fork: parent tid; others: the task itself */
	__u32 tgid;        /* tgid of tid */
	__u32 child_tid;   /* fork: new task; exec: old_pid */
	__u32 child_tgid;  /* fork: new task's tgid */
	__s32 exit_code;   /* exit: task->exit_code (wait status form) */
	__u16 cpu;
	__u8 kind;         /* TL_PROC_* */
	__u8 flags;        /* TL_PF_* */
	__u32 data_len;    /* exec: bytes of argv copied into data */
	char comm[16];     /* fork: child comm; exec/exit: comm; rename: new comm */
	char old_comm[16]; /* fork: parent comm; rename: old comm */
	char data[TL_PROC_DATA_LEN]; /* exec: argv, NUL separated, truncated */
	__u32 pad;
};                     /* 328 bytes */

#endif /* TIMELINE_EVENTS_H */
