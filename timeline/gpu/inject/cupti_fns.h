/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* libcupti entry points, resolved with dlsym (libcupti is never linked:
 * it comes from the target's own environment). Prototypes from cupti.h. */
#ifndef TL_CUPTI_FNS_H
#define TL_CUPTI_FNS_H
#include <cupti.h>

#define TL_CUPTI_REQUIRED(X) \
	X(cuptiGetVersion) X(cuptiGetResultString) X(cuptiActivityRegisterCallbacks) \
	X(cuptiActivityEnable) X(cuptiActivityDisable) X(cuptiActivityGetNextRecord) \
	X(cuptiActivityFlushAll) X(cuptiActivityGetNumDroppedRecords)
#define TL_CUPTI_OPTIONAL(X) \
	X(cuptiActivityRegisterTimestampCallback) X(cuptiActivityFlushPeriod) \
	X(cuptiActivityEnableRuntimeApi) X(cuptiActivityEnableDriverApi) X(cuptiSetThreadIdType)

struct tl_cupti_fns {
#define TL_FIELD(name) __typeof__(name) *name;
	TL_CUPTI_REQUIRED(TL_FIELD)
	TL_CUPTI_OPTIONAL(TL_FIELD)
#undef TL_FIELD
	uint32_t version;
	int layout;           /* 12 or 13: which decoder matches this libcupti's records */
};
extern struct tl_cupti_fns tl_cupti;
#endif
