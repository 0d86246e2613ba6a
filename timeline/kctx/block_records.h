/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Family block (timeline/kctx/family.py, block.bpf.c beside this file):
 * block I/O requests.  Mirrored once by timeline/kctx/block_records.py;
 * tests/unit/test_layout.py checks both against the BTF of block.bpf.o.
 * Included after vmlinux.h (tracking.bpf.h), which defines the __u* types.
 */
#ifndef TIMELINE_BLOCK_RECORDS_H
#define TIMELINE_BLOCK_RECORDS_H

#define TL_RING_BLOCK 5

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

#endif /* TIMELINE_BLOCK_RECORDS_H */
