// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * CUPTI activity record -> struct tl_gpu_record.  CUPTI hands out records in
 * the layout of its own version, so this file is compiled once per header
 * set (TL_CUPTI_GEN=12: CUPTI 12.9 headers, 13: CUPTI 13.0 headers) and
 * cupti_loader.c picks the decoder matching the loaded libcupti.
 * Fields are read by name: the compiler, not this file, knows the offsets.
 */
#include <string.h>
#include <cupti.h>
#include "inject.h"

#if TL_CUPTI_GEN == 12
#define KERNEL_T CUpti_ActivityKernel9
#define DECODE tl_decode_v12
#elif TL_CUPTI_GEN == 13
#define KERNEL_T CUpti_ActivityKernel10
#define DECODE tl_decode_v13
#else
#error "TL_CUPTI_GEN must be 12 or 13"
#endif

#define GRAPH_FLAGS(a) ((a)->graphId ? TL_GF_GRAPH : 0)

int DECODE(const void *activity, struct tl_gpu_record *o, tl_intern_fn intern)
{
	const CUpti_Activity *a = activity;

	memset(o, 0, sizeof(*o));
	switch (a->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		const KERNEL_T *k = activity;
		o->kind = TL_GPU_KERNEL;
		o->start = k->start;
		o->end = k->end;
		o->device = k->deviceId;
		o->context = k->contextId;
		o->stream = k->streamId;
		o->correlation = k->correlationId;
		o->name = intern(k->name);
		o->grid[0] = k->gridX, o->grid[1] = k->gridY, o->grid[2] = k->gridZ;
		o->block[0] = k->blockX, o->block[1] = k->blockY, o->block[2] = k->blockZ;
		o->registers = k->registersPerThread;
		o->static_smem = k->staticSharedMemory;
		o->dynamic_smem = k->dynamicSharedMemory;
		o->graph_id = k->graphId;
		o->graph_node = k->graphNodeId;
		o->flags = GRAPH_FLAGS(k);
		return 1;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		const CUpti_ActivityMemcpy6 *m = activity;
		o->kind = TL_GPU_MEMCPY;
		o->start = m->start;
		o->end = m->end;
		o->bytes = m->bytes;
		o->device = m->deviceId;
		o->context = m->contextId;
		o->stream = m->streamId;
		o->correlation = m->correlationId;
		o->copy_kind = m->copyKind;
		o->src_kind = m->srcKind;
		o->dst_kind = m->dstKind;
		o->graph_id = m->graphId;
		o->graph_node = m->graphNodeId;
		o->flags = GRAPH_FLAGS(m);
		return 1;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY2: {
		const CUpti_ActivityMemcpyPtoP4 *m = activity;
		o->kind = TL_GPU_MEMCPY;
		o->start = m->start;
		o->end = m->end;
		o->bytes = m->bytes;
		o->device = m->deviceId;
		o->context = m->contextId;
		o->stream = m->streamId;
		o->correlation = m->correlationId;
		o->copy_kind = m->copyKind;
		o->src_kind = m->srcKind;
		o->dst_kind = m->dstKind;
		o->src_device = m->srcDeviceId;
		o->dst_device = m->dstDeviceId;
		o->graph_id = m->graphId;
		o->graph_node = m->graphNodeId;
		o->flags = TL_GF_PEER | GRAPH_FLAGS(m);
		return 1;
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const CUpti_ActivityMemset4 *m = activity;
		o->kind = TL_GPU_MEMSET;
		o->start = m->start;
		o->end = m->end;
		o->bytes = m->bytes;
		o->value = m->value;
		o->device = m->deviceId;
		o->context = m->contextId;
		o->stream = m->streamId;
		o->correlation = m->correlationId;
		o->graph_id = m->graphId;
		o->graph_node = m->graphNodeId;
		o->flags = GRAPH_FLAGS(m);
		return 1;
	}
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER: {
		const CUpti_ActivityAPI *api = activity;
		o->kind = TL_GPU_API;
		o->flags = a->kind == CUPTI_ACTIVITY_KIND_DRIVER ? TL_GF_DRIVER : 0;
		o->start = api->start;
		o->end = api->end;
		o->tid = api->threadId;   /* as CUPTI reports it */
		o->correlation = api->correlationId;
		o->domain = api->cbid;
		o->value = (uint32_t)api->returnValue;
		return 1;
	}
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
		const CUpti_ActivitySynchronization2 *s = activity;
		o->kind = TL_GPU_SYNC;
		o->start = s->start;
		o->end = s->end;
		o->context = s->contextId;
		o->stream = s->streamId;
		o->correlation = s->correlationId;
		o->sync_kind = (uint8_t)s->type;
		o->value = s->cudaEventId;
		return 1;
	}
	default:
		return 0;
	}
}
