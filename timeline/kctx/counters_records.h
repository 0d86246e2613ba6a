/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Family counters (timeline/kctx/family.py, counters.bpf.c beside this file):
 * per-thread totals at exit.  Mirrored once by timeline/kctx/counters_records.py;
 * tests/unit/test_layout.py checks both against the BTF of counters.bpf.o.
 * Included after vmlinux.h (tracking.bpf.h), which defines the __u* types.
 */
#ifndef TIMELINE_COUNTERS_RECORDS_H
#define TIMELINE_COUNTERS_RECORDS_H

#define TL_RING_COUNTERS 6

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

#endif /* TIMELINE_COUNTERS_RECORDS_H */
