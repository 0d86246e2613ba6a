/*
 * STAND-IN for the CUDA driver library (libcuda.so.1), for tests only.
 *
 * Exports a few real driver API symbols with their real signatures so that
 * timeline's uprobes and argument decoders run against the x86-64 ABI exactly
 * as with NVIDIA's library (11-argument cuLaunchKernel with stack arguments,
 * cuMemAlloc_v2 returning a pointer through its first argument...).  Nothing
 * here talks to a GPU: calls succeed and hand out fake device pointers.
 */
#include <stddef.h>
#include <string.h>

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

CUresult cuInit(unsigned int flags) { return flags ? 1 : 0; }

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
	return f ? 0 : 400; /* CUDA_ERROR_INVALID_HANDLE */
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
	standin_sink = (unsigned long long)hmod;
	return 0;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	standin_sink = dst + (unsigned long long)src + n + (unsigned long long)s;
	return 0;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	standin_sink = (unsigned long long)dst + src + n + (unsigned long long)s;
	return 0;
}

CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuStreamSynchronize(CUstream s) { standin_sink = (unsigned long long)s; return 0; }
CUresult cuGraphLaunch(CUgraphExec e, CUstream s) { standin_sink = (unsigned long long)e + (unsigned long long)s; return 0; }
