/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Family cuda (timeline/cuda/family.py, cuda.bpf.c beside this file): CUDA
 * runtime, driver and NCCL calls.  Mirrored once by timeline/cuda/records.py;
 * tests/unit/test_layout.py checks both against the BTF of cuda.bpf.o.
 * Included after vmlinux.h (tracking.bpf.h), which defines the __u* types.
 */
#ifndef TIMELINE_CUDA_RECORDS_H
#define TIMELINE_CUDA_RECORDS_H

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

#endif /* TIMELINE_CUDA_RECORDS_H */
