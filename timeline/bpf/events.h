/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What every ring shares: the range of ring ids and the layout of the loss
 * counters.  Mirrored by timeline/events.py (tests/unit/test_layout.py compares).
 *
 * Each family's records are defined in its own header beside its code (e.g.
 * timeline/cuda/records.h, mirrored by timeline/cuda/records.py): its ring id
 * TL_RING_<FAMILY>, its record kinds and flags, and its record struct.  A ring
 * carries records of one fixed size, so user space decodes a whole chunk at
 * once with a numpy structured dtype instead of walking variable-length
 * records.
 */
#ifndef TIMELINE_EVENTS_H
#define TIMELINE_EVENTS_H

/* Ring ids are 1 .. TL_MAX_RINGS - 1 (0 is no ring); each is claimed by one
 * family (tests/unit/test_family_registry.py refuses a collision).  Raising it
 * only grows the drops map below. */
#define TL_MAX_RINGS 32

/* Per-CPU loss counters (map "drops", see tl_reserve in tracking.bpf.h):
 * four groups of TL_MAX_RINGS slots, indexed by group + ring id. */
#define TL_DROP_FULL    (0 * TL_MAX_RINGS) /* records lost: the ring had no room */
#define TL_DROP_REFUSED (1 * TL_MAX_RINGS) /* records lost: reserve failed twice with room left */
#define TL_DROP_RETRIED (2 * TL_MAX_RINGS) /* reserves that failed with room left, then succeeded */
#define TL_DROP_FILL    (3 * TL_MAX_RINGS) /* most bytes pending at a refusal (a maximum, not a count) */
#define TL_DROP_SLOTS   (4 * TL_MAX_RINGS)

#endif /* TIMELINE_EVENTS_H */
