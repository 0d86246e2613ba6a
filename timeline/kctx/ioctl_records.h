/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Family ioctl (timeline/kctx/family.py, ioctl.bpf.c beside this file):
 * ioctl(2) calls.  Mirrored once by timeline/kctx/ioctl_records.py;
 * tests/unit/test_layout.py checks both against the BTF of ioctl.bpf.o.
 * Included after vmlinux.h (tracking.bpf.h), which defines the __u* types.
 */
#ifndef TIMELINE_IOCTL_RECORDS_H
#define TIMELINE_IOCTL_RECORDS_H

#define TL_RING_IOCTL 4

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

#endif /* TIMELINE_IOCTL_RECORDS_H */
