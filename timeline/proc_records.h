/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Family proc (timeline/core_families.py, timeline/bpf/proc.bpf.c): the
 * process tree's records.  Mirrored once by timeline/proc_records.py;
 * tests/unit/test_layout.py checks both against the BTF of proc.bpf.o.
 * Included after vmlinux.h (tracking.bpf.h), which defines the __u* types.
 */
#ifndef TIMELINE_PROC_RECORDS_H
#define TIMELINE_PROC_RECORDS_H

#define TL_RING_PROC 2

/* kinds */
#define TL_PROC_FORK   1
#define TL_PROC_EXEC   2
#define TL_PROC_EXIT   3
#define TL_PROC_RENAME 4

/* flags */
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

#endif /* TIMELINE_PROC_RECORDS_H */
