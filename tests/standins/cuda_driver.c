/*
 * STAND-IN for the CUDA driver library (libcuda.so.1), for tests only.
 *
 * Exports a few real driver API symbols with their real signatures so that
 * timeline's uprobes and argument decoders run against the x86-64 ABI exactly
 * as with NVIDIA's library (11-argument cuLaunchKernel with stack arguments,
 * cuMemAlloc_v2 returning a pointer through its first argument...).  Nothing
 * here talks to a GPU: calls succeed and hand out fake device pointers.
 *
 * Like NVIDIA's driver, cuInit loads CUDA_INJECTION64_PATH and calls its
 * InitializeInjection; once the stand-in libcupti (cupti.c) has registered
 * with standin_driver_set_tracer, calls and the "GPU work" they cause are
 * reported to it (API records, kernels, copies, memsets, syncs).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "standin_tracer.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct CUfunc_st *CUfunction;
typedef struct CUmod_st *CUmodule;
typedef struct CUstream_st *CUstream;
typedef struct CUgraphExec_st *CUgraphExec;

typedef struct {
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	void *attrs;
	unsigned int numAttrs;
} CUlaunchConfig;

static CUdeviceptr next_ptr = 0x7e0000000000ULL;
static unsigned long long next_fn = 0xf0000000ULL;
volatile unsigned long long standin_sink;  /* keeps the bodies from being folded */

static const struct standin_tracer *tracer;
void standin_driver_set_tracer(const struct standin_tracer *t) { tracer = t; }

/* Per-thread API nesting: a driver call made by the runtime is not reported
 * on its own; its work carries the runtime call's correlation id. */
static __thread struct { const char *name; int runtime; uint64_t start; uint32_t corr; } api_stack[4];
static __thread int api_depth;

void standin_api_begin(int runtime, const char *name)
{
	int d = api_depth++;

	if (d >= 4 || !tracer)
		return;
	api_stack[d].name = name;
	api_stack[d].runtime = runtime;
	api_stack[d].start = tracer->now();
	api_stack[d].corr = d ? api_stack[d - 1].corr : tracer->next_correlation();
}

void standin_api_end(void)
{
	int d = --api_depth;

	if (d >= 4 || !tracer || !api_stack[d].name)
		return;
	if (d == 0) {
		static __thread uint32_t tid;
		if (!tid)  /* threads of a forked child never call CUDA: no renewal needed */
			tid = (uint32_t)syscall(SYS_gettid);
		tracer->api(api_stack[d].runtime, api_stack[d].name, api_stack[d].start, tracer->now(),
			    api_stack[d].corr, tid);
	}
	api_stack[d].name = NULL;
}

static uint32_t current_corr(void) { return api_depth > 0 && api_depth <= 4 ? api_stack[api_depth - 1].corr : 0; }

static int injected;
CUresult cuInit(unsigned int flags)
{
	const char *path = getenv("CUDA_INJECTION64_PATH");

	if (path && !injected) {
		void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
		injected = 1;
		if (init)
			init();
	}
	return flags ? 1 : 0;
}

/* kernel names by function handle, as cuModuleGetFunction handed them out */
static struct { CUfunction f; char name[96]; } fn_names[64];
static const char *name_of(CUfunction f)
{
	for (int i = 0; i < 64; i++)
		if (fn_names[i].f == f)
			return fn_names[i].name;
	return "standin_kernel";
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	if (!bytesize)
		return 1; /* CUDA_ERROR_INVALID_VALUE */
	*dptr = next_ptr;
	next_ptr += (bytesize + 0xfffff) & ~0xfffffULL;
	return 0;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) { return dptr ? 0 : 1; }

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
			CUstream stream, void **params, void **extra)
{
	standin_sink = (unsigned long long)f + gx + gy + gz + bx + by + bz + shmem +
		       (unsigned long long)stream + (unsigned long long)params + (unsigned long long)extra;
	if (!f)
		return 400; /* CUDA_ERROR_INVALID_HANDLE */
	if (tracer) {
		unsigned grid[3] = { gx, gy, gz }, block[3] = { bx, by, bz };
		standin_api_begin(0, "cuLaunchKernel");
		tracer->kernel(current_corr(), name_of(f), grid, block, shmem, (uintptr_t)stream, 0, 0);
		standin_api_end();
	}
	return 0;
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
	standin_sink = config->gridDimX + (unsigned long long)f + (unsigned long long)params + (unsigned long long)extra;
	return 0;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	next_fn += 0x100 + strlen(name);
	*hfunc = (CUfunction)next_fn;
	for (int i = 0; i < 64; i++)
		if (!fn_names[i].f) {
			fn_names[i].f = *hfunc;
			strncpy(fn_names[i].name, name, sizeof(fn_names[i].name) - 1);
			break;
		}
	standin_sink = (unsigned long long)hmod;
	return 0;
}

/* CUPTI copy kinds: 1 HtoD, 2 DtoH */
static void copy_work(const char *api, int kind, size_t n, CUstream s, int peer)
{
	if (!tracer)
		return;
	standin_api_begin(0, api);
	tracer->memcpy(current_corr(), kind, n, (uintptr_t)s, peer);
	standin_api_end();
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	standin_sink = dst + (unsigned long long)src + n + (unsigned long long)s;
	copy_work("cuMemcpyHtoDAsync_v2", 1, n, s, 0);
	return 0;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	standin_sink = (unsigned long long)dst + src + n + (unsigned long long)s;
	copy_work("cuMemcpyDtoHAsync_v2", 2, n, s, 0);
	return 0;
}

CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void *dst_ctx, CUdeviceptr src, void *src_ctx, size_t n, CUstream s)
{
	standin_sink = dst + src + n + (unsigned long long)dst_ctx + (unsigned long long)src_ctx;
	copy_work("cuMemcpyPeerAsync", 10, n, s, 1);
	return 0;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s)
{
	standin_sink = dst + value + n;
	if (tracer) {
		standin_api_begin(0, "cuMemsetD8Async");
		tracer->memset(current_corr(), value, n, (uintptr_t)s);
		standin_api_end();
	}
	return 0;
}

/* CUpti_ActivitySynchronizationType: 3 stream, 4 context synchronize */
static void sync_work(const char *api, int type, CUstream s)
{
	if (!tracer)
		return;
	standin_api_begin(0, api);
	tracer->sync(current_corr(), type, (uintptr_t)s);
	standin_api_end();
}

CUresult cuCtxSynchronize(void) { sync_work("cuCtxSynchronize", 4, NULL); return 0; }
CUresult cuStreamSynchronize(CUstream s) { standin_sink = (unsigned long long)s; sync_work("cuStreamSynchronize", 3, s); return 0; }
CUresult cuGraphLaunch(CUgraphExec e, CUstream s)
{
	standin_sink = (unsigned long long)e + (unsigned long long)s;
	if (tracer) {  /* a graph of two kernel nodes */
		unsigned grid[3] = { 1, 1, 1 }, block[3] = { 32, 1, 1 };
		uint32_t graph = (uint32_t)((uintptr_t)e >> 8);
		standin_api_begin(0, "cuGraphLaunch");
		tracer->kernel(current_corr(), "standin_graph_node_a", grid, block, 0, (uintptr_t)s, graph, 1);
		tracer->kernel(current_corr(), "standin_graph_node_b", grid, block, 0, (uintptr_t)s, graph, 2);
		standin_api_end();
	}
	return 0;
}
