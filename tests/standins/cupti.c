/*
 * STAND-IN for NVIDIA's libcupti.so.12 (or .13 when compiled against the CUDA 13
 * CUPTI headers), for tests only (no GPU here).
 *
 * Exports the CUPTI activity functions timeline's injection library uses,
 * with their real prototypes (compiled against the real CUPTI 12.9 headers),
 * and fills the buffers it is given with records of the real layouts
 * (CUpti_ActivityKernel9 — Kernel10 with CUDA 13 headers — Memcpy6,
 * MemcpyPtoP4, Memset4, API, Synchronization2) for the calls the stand-in driver/runtime report
 * (standin_tracer.h).  Times come from the registered timestamp callback,
 * else CLOCK_REALTIME (CUPTI's default).  Environment knobs for tests:
 *   STANDIN_CUPTI_VERSION  what cuptiGetVersion says (default: the headers' CUPTI_API_VERSION)
 *   STANDIN_CUPTI_BUSY     cuptiActivityEnable fails with
 *                          CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
 *   STANDIN_CUPTI_DISCARD  full buffers are freed here, never handed back
 *                          (benchmark: CUPTI's side of the cost alone)
 * Not NVIDIA's behaviour in detail: buffers complete on the thread that
 * fills them or flushes, and "GPU" times are made up (1 us after the call,
 * 5 us long, in order per stream).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cupti.h>
#include "standin_tracer.h"

#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 kernel_record;
#else
typedef CUpti_ActivityKernel9 kernel_record;
#endif

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUpti_BuffersCallbackRequestFunc requested;
static CUpti_BuffersCallbackCompleteFunc completed;
static CUpti_TimestampCallbackFunc ts_cb;
static unsigned enabled_kinds[64];
static unsigned char runtime_on[2048], driver_on[2048];
static uint8_t *buf;
static size_t buf_size, buf_used;
static size_t dropped;
static uint32_t corr_next = 1;
static uint64_t stream_free_at[64];
static int period_ms;
static int discard;
static pid_t pid;

static uint64_t now(void)
{
	struct timespec t;
	if (ts_cb)
		return ts_cb();
	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

CUptiResult cuptiGetVersion(uint32_t *version)
{
	const char *v = getenv("STANDIN_CUPTI_VERSION");
	*version = v ? (uint32_t)strtoul(v, NULL, 10) : CUPTI_API_VERSION;
	return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult r, const char **str)
{
	*str = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
	       : r == CUPTI_ERROR_INVALID_OPERATION                 ? "CUPTI_ERROR_INVALID_OPERATION"
								     : "CUPTI_ERROR_UNKNOWN";
	return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req, CUpti_BuffersCallbackCompleteFunc comp)
{
	requested = req;
	completed = comp;
	discard = getenv("STANDIN_CUPTI_DISCARD") != NULL;
	pid = getpid();
	return CUPTI_SUCCESS;
}

static int any_enabled(void)
{
	for (size_t i = 0; i < 64; i++)
		if (enabled_kinds[i])
			return 1;
	return 0;
}

CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f)
{
	if (any_enabled())  /* CUPTI: register before enabling any activity kind */
		return CUPTI_ERROR_INVALID_OPERATION;
	ts_cb = f;
	return CUPTI_SUCCESS;
}

static void complete_locked(void)
{
	uint8_t *b = buf;
	size_t used = buf_used;

	if (!b)
		return;
	buf = NULL;
	buf_used = 0;
	if (discard) {
		free(b);
		return;
	}
	pthread_mutex_unlock(&lock);  /* the client's callback may call back into CUPTI */
	completed(NULL, 0, b, buf_size, used);
	pthread_mutex_lock(&lock);
}

static void *reserve_locked(size_t size)
{
	if (buf && buf_used + size > buf_size)
		complete_locked();
	if (!buf) {
		size_t max = 0;
		requested(&buf, &buf_size, &max);
		buf_used = 0;
		if (!buf || buf_size < size) {
			buf = NULL;
			dropped++;
			return NULL;
		}
	}
	void *r = buf + buf_used;
	memset(r, 0, size);
	buf_used += (size + 7) & ~(size_t)7;
	return r;
}

static uint64_t gpu_slot(uintptr_t stream, uint64_t *end)
{
	uint64_t *free_at = &stream_free_at[(stream >> 4) % 64];
	uint64_t s = now() + 1000;
	if (s < *free_at)
		s = *free_at;
	*end = s + 5000;
	*free_at = *end;
	return s;
}

static uint32_t next_correlation(void) { return __atomic_fetch_add(&corr_next, 1, __ATOMIC_RELAXED); }

static const struct { const char *name; int cbid; } runtime_names[] = {
	{ "cudaLaunchKernel", CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 },
	{ "cudaMemcpyAsync", CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020 },
	{ "cudaMemsetAsync", CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020 },
	{ "cudaDeviceSynchronize", CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020 },
	{ "cudaGraphLaunch", CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000 },
	{ "cudaMalloc", CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020 },
}, driver_names[] = {
	{ "cuLaunchKernel", CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel },
	{ "cuMemcpyHtoDAsync_v2", CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2 },
	{ "cuMemcpyDtoHAsync_v2", CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2 },
	{ "cuMemcpyPeerAsync", CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync },
	{ "cuMemsetD8Async", CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async },
	{ "cuStreamSynchronize", CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize },
	{ "cuCtxSynchronize", CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize },
	{ "cuGraphLaunch", CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch },
	{ "cuMemAlloc_v2", CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2 },
};

static int cbid_of(int runtime, const char *name)
{
	size_t n = runtime ? sizeof(runtime_names) / sizeof(*runtime_names) : sizeof(driver_names) / sizeof(*driver_names);
	for (size_t i = 0; i < n; i++) {
		const char *s = runtime ? runtime_names[i].name : driver_names[i].name;
		if (!strcmp(s, name))
			return runtime ? runtime_names[i].cbid : driver_names[i].cbid;
	}
	return -1;
}

/* As NVIDIA's CUPTI: API records carry pthread_self() unless asked for the system's thread ids. */
static int system_thread_ids;
CUptiResult cuptiSetThreadIdType(CUpti_ActivityThreadIdType type)
{
	system_thread_ids = type == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM;
	return CUPTI_SUCCESS;
}

static void t_api(int runtime, const char *name, uint64_t start, uint64_t end, uint32_t corr, uint32_t tid)
{
	if (!system_thread_ids)
		tid = (uint32_t)pthread_self();
	CUpti_ActivityKind kind = runtime ? CUPTI_ACTIVITY_KIND_RUNTIME : CUPTI_ACTIVITY_KIND_DRIVER;
	int cbid = cbid_of(runtime, name);
	CUpti_ActivityAPI *a;

	if (cbid < 0 || !(enabled_kinds[kind] || (runtime ? runtime_on : driver_on)[cbid]))
		return;
	pthread_mutex_lock(&lock);
	if ((a = reserve_locked(sizeof(*a)))) {
		a->kind = kind;
		a->cbid = (CUpti_CallbackId)cbid;
		a->start = start;
		a->end = end;
		a->processId = (uint32_t)pid;
		a->threadId = tid;
		a->correlationId = corr;
	}
	pthread_mutex_unlock(&lock);
}

static void t_kernel(uint32_t corr, const char *name, const unsigned grid[3], const unsigned block[3], unsigned shmem,
		     uintptr_t stream, uint32_t graph_id, uint64_t graph_node)
{
	kernel_record *k;

	if (!enabled_kinds[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL])
		return;
	pthread_mutex_lock(&lock);
	if ((k = reserve_locked(sizeof(*k)))) {
		k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
		k->start = gpu_slot(stream, &k->end);
		k->completed = k->end;
		k->deviceId = 0;
		k->contextId = 1;
		k->streamId = (uint32_t)(stream ? (stream & 0xff) + 12 : 7);
		k->gridX = (int)grid[0], k->gridY = (int)grid[1], k->gridZ = (int)grid[2];
		k->blockX = (int)block[0], k->blockY = (int)block[1], k->blockZ = (int)block[2];
		k->registersPerThread = 32;
		k->staticSharedMemory = 1024;
		k->dynamicSharedMemory = (int)shmem;
		k->correlationId = corr;
		k->name = name;
		k->graphId = graph_id;
		k->graphNodeId = graph_node;
	}
	pthread_mutex_unlock(&lock);
}

static void t_memcpy(uint32_t corr, int copy_kind, uint64_t bytes, uintptr_t stream, int peer)
{
	pthread_mutex_lock(&lock);
	if (peer && enabled_kinds[CUPTI_ACTIVITY_KIND_MEMCPY2]) {
		CUpti_ActivityMemcpyPtoP4 *m = reserve_locked(sizeof(*m));
		if (m) {
			m->kind = CUPTI_ACTIVITY_KIND_MEMCPY2;
			m->copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
			m->srcKind = m->dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
			m->bytes = bytes;
			m->start = gpu_slot(stream, &m->end);
			m->deviceId = 0;
			m->contextId = 1;
			m->streamId = (uint32_t)(stream ? (stream & 0xff) + 12 : 7);
			m->srcDeviceId = 0;
			m->dstDeviceId = 1;
			m->correlationId = corr;
		}
	} else if (!peer && enabled_kinds[CUPTI_ACTIVITY_KIND_MEMCPY]) {
		CUpti_ActivityMemcpy6 *m = reserve_locked(sizeof(*m));
		if (m) {
			m->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
			m->copyKind = (uint8_t)copy_kind;
			m->srcKind = copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD ? CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE
										  : CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
			m->dstKind = copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD ? CUPTI_ACTIVITY_MEMORY_KIND_DEVICE
										  : CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
			m->bytes = bytes;
			m->start = gpu_slot(stream, &m->end);
			m->contextId = 1;
			m->streamId = (uint32_t)(stream ? (stream & 0xff) + 12 : 7);
			m->correlationId = corr;
		}
	}
	pthread_mutex_unlock(&lock);
}

static void t_memset(uint32_t corr, uint32_t value, uint64_t bytes, uintptr_t stream)
{
	CUpti_ActivityMemset4 *m;

	if (!enabled_kinds[CUPTI_ACTIVITY_KIND_MEMSET])
		return;
	pthread_mutex_lock(&lock);
	if ((m = reserve_locked(sizeof(*m)))) {
		m->kind = CUPTI_ACTIVITY_KIND_MEMSET;
		m->value = value;
		m->bytes = bytes;
		m->start = gpu_slot(stream, &m->end);
		m->contextId = 1;
		m->streamId = (uint32_t)(stream ? (stream & 0xff) + 12 : 7);
		m->correlationId = corr;
	}
	pthread_mutex_unlock(&lock);
}

static void t_sync(uint32_t corr, int type, uintptr_t stream)
{
	CUpti_ActivitySynchronization2 *s;

	if (!enabled_kinds[CUPTI_ACTIVITY_KIND_SYNCHRONIZATION])
		return;
	pthread_mutex_lock(&lock);
	if ((s = reserve_locked(sizeof(*s)))) {
		s->kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
		s->type = (CUpti_ActivitySynchronizationType)type;
		s->end = now();
		s->start = s->end - 2000;
		s->correlationId = corr;
		s->contextId = 1;
		s->streamId = (uint32_t)(stream ? (stream & 0xff) + 12 : CUPTI_SYNCHRONIZATION_INVALID_VALUE);
		s->cudaEventId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
	}
	pthread_mutex_unlock(&lock);
}

static const struct standin_tracer tracer = { now, next_correlation, t_api, t_kernel, t_memcpy, t_memset, t_sync };

static void hook_driver(void)
{
	void *d = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	void (*set)(const struct standin_tracer *) = d ? (void (*)(const struct standin_tracer *))dlsym(d, "standin_driver_set_tracer") : NULL;
	if (set)
		set(&tracer);
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind)
{
	if (getenv("STANDIN_CUPTI_BUSY"))
		return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	if ((unsigned)kind >= 64)
		return CUPTI_ERROR_INVALID_KIND;
	enabled_kinds[kind] = 1;
	hook_driver();
	return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind)
{
	if ((unsigned)kind < 64)
		enabled_kinds[kind] = 0;
	return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable)
{
	if (cbid >= sizeof(runtime_on))
		return CUPTI_ERROR_INVALID_PARAMETER;
	runtime_on[cbid] = enable;
	hook_driver();
	return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable)
{
	if (cbid >= sizeof(driver_on))
		return CUPTI_ERROR_INVALID_PARAMETER;
	driver_on[cbid] = enable;
	hook_driver();
	return CUPTI_SUCCESS;
}

static size_t record_size(const CUpti_Activity *a)
{
	switch (a->kind) {
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(kernel_record);
	case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
	case CUPTI_ACTIVITY_KIND_MEMCPY2: return sizeof(CUpti_ActivityMemcpyPtoP4);
	case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER: return sizeof(CUpti_ActivityAPI);
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
	default: return 0;
	}
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record)
{
	uint8_t *next = *record ? (uint8_t *)*record + ((record_size(*record) + 7) & ~(size_t)7) : buffer;
	if (*record && !record_size(*record))
		return CUPTI_ERROR_INVALID_KIND;
	if (next >= buffer + valid)
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	*record = (CUpti_Activity *)next;
	return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
	(void)flag;
	pthread_mutex_lock(&lock);
	if (buf_used)
		complete_locked();
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

static void *flusher(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec t = { period_ms / 1000, (long)(period_ms % 1000) * 1000000L };
		nanosleep(&t, NULL);
		cuptiActivityFlushAll(0);
	}
	return NULL;
}

CUptiResult cuptiActivityFlushPeriod(uint32_t ms)
{
	pthread_t t;
	if (!period_ms && ms) {
		period_ms = (int)ms;
		pthread_create(&t, NULL, flusher, NULL);
		pthread_detach(t);
	}
	period_ms = (int)ms;
	return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream, size_t *n)
{
	(void)ctx, (void)stream;
	pthread_mutex_lock(&lock);
	*n = dropped;
	dropped = 0;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}
