// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * CUPTI activity API: buffers in, batches of struct tl_gpu_record out.
 * Only the activity API is used (no cuptiSubscribe): kernels, copies,
 * memsets, synchronizations, and the runtime/driver calls that launch or copy
 * (enabled per callback id, so other API calls cost nothing) to tie each
 * correlation id to the calling thread.  A whole CUPTI buffer becomes one
 * RECORDS message (or a few, within TL_GPU_MSG_MAX_LEN).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "inject.h"
#include "cupti_fns.h"

#define BUFFER_SIZE (4u << 20)   /* CUPTI advises 1-10 MB */
#define FLUSH_PERIOD_MS 200
#define BATCH 4096

char tl_activity_enabled[512];   /* for HELLO: kinds and API tracing actually enabled */

static const CUpti_CallbackId runtime_cbids[] = {
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
	CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_ptds_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_ptsz_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeer_v4000, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000,
	CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaMemset_ptds_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
	CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
};

static const CUpti_CallbackId driver_cbids[] = {
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuMemcpy, CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds,
	CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync, CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds,
	CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds,
	CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds,
	CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer, CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer_ptds,
	CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync, CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds,
	CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2, CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2_ptds,
	CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize, CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
};

static uint64_t boottime_cb(void) { return tl_now(); }

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	*buffer = aligned_alloc(8, BUFFER_SIZE);  /* NULL: CUPTI drops and counts */
	*size = *buffer ? BUFFER_SIZE : 0;
	*max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
				      size_t valid)
{
	int (*decode)(const void *, struct tl_gpu_record *, tl_intern_fn) =
		tl_cupti.layout == 13 ? tl_decode_v13 : tl_decode_v12;
	struct tl_gpu_record *batch = malloc(BATCH * sizeof(*batch));
	CUpti_Activity *rec = NULL;
	size_t n = 0, dropped = 0;
	int lost = !batch;
	(void)size;

	__atomic_add_fetch(&tl_count.cupti_buffers, 1, __ATOMIC_RELAXED);
	while (valid && tl_cupti.cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
		if (!batch || !decode(rec, &batch[n], tl_intern_cstr))
			continue;
		if (++n == BATCH) {
			lost |= tl_channel_send_records(batch, n) != 0;
			n = 0;
		}
	}
	if (n)
		lost |= tl_channel_send_records(batch, n) != 0;
	if (lost && valid)  /* recorder gone or stuck, or no memory: counted, never waited on */
		__atomic_add_fetch(&tl_count.buffers_lost, 1, __ATOMIC_RELAXED);
	free(batch);
	free(buffer);
	if (tl_cupti.cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
		__atomic_add_fetch(&tl_count.cupti_dropped, dropped, __ATOMIC_RELAXED);
	/* CUPTI's periodic flush also sends NVTX ranges waiting in idle threads' batches,
	 * so a crash loses no more NVTX than GPU records. */
	tl_nvtx_flush_all(0);
}

static void note_enabled(const char *what)
{
	size_t l = strlen(tl_activity_enabled);
	snprintf(tl_activity_enabled + l, sizeof(tl_activity_enabled) - l, "%s\"%s\"", l ? "," : "", what);
}

static const char *result_string(CUptiResult r)
{
	const char *s = NULL;
	if (tl_cupti.cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
		s = "unknown CUPTI error";
	return s;
}

/* TIMELINE_GPU_OFF="api,timestamps,sync,memset,memcpy": parts left off, to measure what each
 * costs the traced program (bench/gpu_truth.py, phase cupti-share); never set by timeline itself.
 * Without "timestamps" GPU times are on CUPTI's default clock, not the trace's. */
static int part_off(const char *part)
{
	const char *off = getenv("TIMELINE_GPU_OFF");
	size_t n = strlen(part);

	for (const char *p = off; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, part, n) && (p[n] == ',' || !p[n]))
			return 1;
	return 0;
}

static int sync_wanted(void)
{
	const char *v = getenv("TIMELINE_GPU_SYNC");

	return v && !strcmp(v, "1");
}

/* Returns NULL when activity is on, else why not (nothing left enabled). */
const char *tl_activity_start(void)
{
	static char reason[512];
	static const struct { CUpti_ActivityKind kind; const char *name; int required; } kinds[] = {
		{ CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "concurrent_kernel", 1 },
		{ CUPTI_ACTIVITY_KIND_MEMCPY, "memcpy", 1 },
		{ CUPTI_ACTIVITY_KIND_MEMCPY2, "memcpy2", 0 },
		{ CUPTI_ACTIVITY_KIND_MEMSET, "memset", 1 },
		/* only with --gpu-sync (TIMELINE_GPU_SYNC=1): on an H200 this kind cost the traced
		 * program more than all the others together (docs/gpu-validation.md) */
		{ CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, "synchronization", 0 },
	};
	CUptiResult r;
	size_t i, api_ok = 0;

	/* The clock first: CUPTI requires it before any kind is enabled. */
	if (!tl_cupti.cuptiActivityRegisterTimestampCallback) {
		snprintf(reason, sizeof(reason), "this libcupti lacks cuptiActivityRegisterTimestampCallback: "
			 "GPU times could not be put on CLOCK_BOOTTIME");
		return reason;
	}
	r = part_off("timestamps") ? CUPTI_SUCCESS : tl_cupti.cuptiActivityRegisterTimestampCallback(boottime_cb);
	if (r != CUPTI_SUCCESS) {
		snprintf(reason, sizeof(reason), "cuptiActivityRegisterTimestampCallback: %s", result_string(r));
		return reason;
	}
	r = tl_cupti.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
	if (r != CUPTI_SUCCESS) {
		snprintf(reason, sizeof(reason), "cuptiActivityRegisterCallbacks: %s", result_string(r));
		return reason;
	}
	for (i = 0; i < sizeof(kinds) / sizeof(*kinds); i++) {
		if ((kinds[i].kind == CUPTI_ACTIVITY_KIND_SYNCHRONIZATION && (part_off("sync") || !sync_wanted())) ||
		    (kinds[i].kind == CUPTI_ACTIVITY_KIND_MEMSET && part_off("memset")) ||
		    ((kinds[i].kind == CUPTI_ACTIVITY_KIND_MEMCPY || kinds[i].kind == CUPTI_ACTIVITY_KIND_MEMCPY2) &&
		     part_off("memcpy")))
			continue;
		r = tl_cupti.cuptiActivityEnable(kinds[i].kind);
		if (r == CUPTI_SUCCESS) {
			note_enabled(kinds[i].name);
		} else if (kinds[i].required) {
			/* e.g. CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: another profiler owns CUPTI */
			snprintf(reason, sizeof(reason), "cuptiActivityEnable(%s): %s", kinds[i].name, result_string(r));
			for (size_t j = 0; j < i; j++)
				tl_cupti.cuptiActivityDisable(kinds[j].kind);
			tl_activity_enabled[0] = 0;
			return reason;
		}
	}
	/* API records' threadId as the kernel's tid (gettid), the tid of every other event; CUPTI's
	 * default on Linux is pthread_self(), which the converter cannot tie to a thread. */
	if (tl_cupti.cuptiSetThreadIdType &&
	    tl_cupti.cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) == CUPTI_SUCCESS)
		note_enabled("system_thread_ids");
	/* Launch/copy/sync calls only: their correlation ids tie GPU work to a thread. */
	if (tl_cupti.cuptiActivityEnableRuntimeApi && tl_cupti.cuptiActivityEnableDriverApi && !part_off("api")) {
		for (i = 0; i < sizeof(runtime_cbids) / sizeof(*runtime_cbids); i++)
			api_ok += tl_cupti.cuptiActivityEnableRuntimeApi(runtime_cbids[i], 1) == CUPTI_SUCCESS;
		for (i = 0; i < sizeof(driver_cbids) / sizeof(*driver_cbids); i++)
			api_ok += tl_cupti.cuptiActivityEnableDriverApi(driver_cbids[i], 1) == CUPTI_SUCCESS;
	}
	if (api_ok)
		note_enabled("api_launch_copy_sync");
	if (tl_cupti.cuptiActivityFlushPeriod &&
	    tl_cupti.cuptiActivityFlushPeriod(FLUSH_PERIOD_MS) == CUPTI_SUCCESS)
		note_enabled("flush_period_200ms");
	return NULL;
}

void tl_activity_flush(int force)
{
	size_t dropped = 0;

	if (!tl_cupti.cuptiActivityFlushAll)
		return;
	tl_cupti.cuptiActivityFlushAll(force ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
	if (tl_cupti.cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS && dropped)
		__atomic_add_fetch(&tl_count.cupti_dropped, dropped, __ATOMIC_RELAXED);
}
