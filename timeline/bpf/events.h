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

/* Ring ids are 1 .. TL_MAX_RINGS - 1 (0 is no ring); each is claimed by one
 * family (tests/test_family_registry.py refuses a collision).  Raising it
 * only grows the drops map below. */
#define TL_MAX_RINGS 32

/* Per-CPU loss counters (map "drops", see tl_reserve in tracking.bpf.h):
 * four groups of TL_MAX_RINGS slots, indexed by group + ring id. */
#define TL_DROP_FULL    (0 * TL_MAX_RINGS) /* records lost: the ring had no room */
#define TL_DROP_REFUSED (1 * TL_MAX_RINGS) /* records lost: reserve failed twice with room left */
#define TL_DROP_RETRIED (2 * TL_MAX_RINGS) /* reserves that failed with room left, then succeeded */
#define TL_DROP_FILL    (3 * TL_MAX_RINGS) /* most bytes pending at a refusal (a maximum, not a count) */
#define TL_DROP_SLOTS   (4 * TL_MAX_RINGS)

/* ---- ring TL_RING_SCHED ---------------------------------------------- */
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

/* ---- ring TL_RING_CUDA: CUDA runtime, driver and NCCL calls (cuda.bpf.c) --- */
#define TL_RING_CUDA 3

#define TL_CUDA_CALL  1  /* entry + return, one record at return */
#define TL_CUDA_ENTRY 2  /* entry only: launches in entry-only mode, or stash full */
#define TL_CUDA_NAME  3  /* a C string argument (kernel name) carried in args */

#define TL_CF_HAS_RET 1  /* ret and dur are valid */
#define TL_CF_OUT     2  /* out = *(u64 *)args[out arg], read at return */
#define TL_CF_TRUNC   4  /* NAME: the string filled args and may be cut */

/* Attach cookie: bits 0-11 probe id (index in timeline/cuda/probes.py),
 * 12-15 out argument + 1, 16-19 string argument + 1, then flags. */
#define TL_CK_ID_MASK   4095
#define TL_CK_OUT_SHIFT 12
#define TL_CK_STR_SHIFT 16
#define TL_CK_RUNTIME   1048576  /* 1 << 20: runtime API (driver calls inside are nested) */
#define TL_CK_DRIVER    2097152  /* 1 << 21: driver API (dropped when nested in a runtime call) */
#define TL_CK_STACK     4194304  /* 1 << 22: copy [sp+8], [sp+16], [sp+24] into args[6..8] */
#define TL_CK_CONFIG    8388608  /* 1 << 23: copy 40 bytes at args[0] (launch config) into args[4..8] */
#define TL_CK_LAUNCH    16777216 /* 1 << 24: a kernel launch */

struct tl_cuda_event {
	__u64 ts;          /* entry, bpf_ktime_get_boot_ns() */
	__u64 dur;         /* return - entry (0 for entry-only records) */
	__u64 args[9];     /* rdi rsi rdx rcx r8 r9 [sp+8] [sp+16] [sp+24] (see TL_CK_*) */
	__u64 ret;         /* rax at return */
	__u64 out;         /* TL_CF_OUT: value returned through a pointer argument */
	__u64 cookie;      /* attach cookie: probe id and decode flags */
	__u32 tid;
	__u32 tgid;
	__u16 cpu;
	__u8 kind;         /* TL_CUDA_* */
	__u8 flags;        /* TL_CF_* */
	__u32 pad;
};                     /* 128 bytes */
/* ---- end of TL_RING_CUDA ------------------------------------------------ */

/* ==== kernel context (issue 4): ioctl, block I/O, counters ============== */
#define TL_RING_IOCTL    4
#define TL_RING_BLOCK    5
#define TL_RING_COUNTERS 6

/* ---- ring TL_RING_IOCTL (ioctl.bpf.c) ---- */
#define TL_IOCTL_CALL 1    /* sys_enter + sys_exit, one record at exit */

#define TL_IOF_NVIDIA 1    /* the fd is a char device named nvidia* */
#define TL_IOF_DETAIL 2    /* detail holds the RM control cmd or alloc class */
#define TL_IOF_XFER   4    /* NV_ESC_IOCTL_XFER_CMD: esc is the wrapped escape */
#define TL_IOF_NOFILE 8    /* the fd could not be resolved to a file */

#define TL_IOCTL_NAME_LEN 32

struct tl_ioctl_event {
	__u64 ts;          /* sys_enter */
	__u64 dur;         /* sys_exit - sys_enter */
	__s64 ret;
	__u64 ino;         /* inode number of the fd's file */
	__u32 tid;
	__u32 tgid;
	__u32 fd;
	__u32 request;
	__u32 rdev;        /* kernel dev_t (major << 20 | minor) of a device file */
	__u32 detail;      /* NVIDIA: RM control cmd (0x2A) or object class (0x28, 0x2B) */
	__u16 mode;        /* i_mode: file type and permissions */
	__u16 cpu;
	__u8 kind;         /* TL_IOCTL_* */
	__u8 flags;        /* TL_IOF_* */
	__u16 esc;         /* NVIDIA 'F' ioctls: escape number (the inner one for XFER) */
	char name[TL_IOCTL_NAME_LEN];   /* dentry name of the file */
	char parent[TL_IOCTL_NAME_LEN]; /* its parent's dentry name */
};                     /* 128 bytes */

/* ---- ring TL_RING_BLOCK (block.bpf.c) ---- */
#define TL_BLOCK_IO 1      /* one completion of a request a tracked thread submitted */

#define TL_BF_SYNC     1
#define TL_BF_META     2
#define TL_BF_FUA      4
#define TL_BF_RAHEAD   8
#define TL_BF_PREFLUSH 16
#define TL_BF_PARTIAL  32  /* the request has bytes left: more completions follow */

struct tl_block_event {
	__u64 ts;          /* inserted into the queue, or issued if never inserted */
	__u64 issue_ts;    /* handed to the driver (0: not seen) */
	__u64 done_ts;     /* completion (IRQ context) */
	__u64 sector;
	__u32 tid;         /* submitting thread */
	__u32 tgid;
	__u32 dev;         /* disk dev_t, kernel encoding (major << 20 | first_minor) */
	__u32 bytes;       /* bytes this completion covers */
	__u16 cpu;         /* cpu of the completion */
	__u8 kind;         /* TL_BLOCK_* */
	__u8 flags;        /* TL_BF_* */
	__u8 op;           /* REQ_OP_*: 0 read, 1 write, 2 flush, 3 discard, ... */
	__u8 status;       /* blk_status_t, 0 = ok */
	__u16 pad;
	char disk[16];     /* gendisk name, e.g. "vda" */
};                     /* 72 bytes */

/* ---- ring TL_RING_COUNTERS (counters.bpf.c) ---- */
#define TL_COUNTERS_EXIT 1 /* a tracked thread's lifetime totals, at its exit */

struct tl_counters_event {
	__u64 ts;
	__u64 utime_ns;
	__u64 stime_ns;
	__u64 min_flt;
	__u64 maj_flt;
	__u64 nvcsw;       /* voluntary context switches */
	__u64 nivcsw;      /* involuntary (preempted) */
	__u64 read_bytes;  /* storage bytes (task I/O accounting; 0 if not built in) */
	__u64 write_bytes;
	__u32 tid;
	__u32 tgid;
	__u16 cpu;
	__u8 kind;         /* TL_COUNTERS_* */
	__u8 flags;
	__u32 pad;
};                     /* 88 bytes */
/* ==== end of kernel context ============================================== */

#endif /* TIMELINE_EVENTS_H */
