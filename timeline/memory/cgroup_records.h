/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Family cgroup (timeline/memory/family.py): counters of the recorded
 * processes' cgroups, sampled in user space (plugins.py) and written into
 * the raw log laid out like a BPF ring.  No BPF program writes them; this
 * header is their one definition, mirrored by cgroup_records.py (the
 * counter names are there: COUNTERS[counter]).  The cgroups' names come in
 * META blocks "cgroup_names" {"cgroups": {index: label}, "members": ...}.
 */
#ifndef TIMELINE_CGROUP_RECORDS_H
#define TIMELINE_CGROUP_RECORDS_H

#define TL_RING_CGROUP 30

#define TL_CGROUP_SAMPLE 1  /* one counter of one cgroup, as the kernel keeps it (cumulative) */

struct tl_cgroup_sample {
	__u64 ts;
	__u64 value;
	__u32 cgroup;      /* index into the "cgroup_names" META blocks */
	__u16 counter;     /* index into cgroup_records.COUNTERS */
	__u8 kind;         /* TL_CGROUP_* */
	__u8 flags;
};                     /* 24 bytes */

#endif /* TIMELINE_CGROUP_RECORDS_H */
