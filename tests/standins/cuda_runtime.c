/*
 * STAND-IN for the CUDA runtime (libcudart.so.12), for tests only.
 *
 * Real symbol names and signatures; each call succeeds and, like the real
 * runtime, is implemented by calling the driver API (the stand-in
 * libcuda.so.1), so the recorder's "driver call inside a runtime call is not
 * counted twice" rule is exercised.  Graph handles are fake but consistent.
 */
#include <stddef.h>

typedef unsigned long long CUdeviceptr;
typedef struct { unsigned int x, y, z; } dim3;

int cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
int cuMemFree_v2(CUdeviceptr dptr);
int cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
		   unsigned int by, unsigned int bz, unsigned int shmem, void *stream, void **params, void **extra);
int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s);
int cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s);
int cuCtxSynchronize(void);
int cuGraphLaunch(void *exec, void *stream);

/* stand-in driver: reports runtime calls to the stand-in libcupti */
void standin_api_begin(int runtime, const char *name);
void standin_api_end(void);

static unsigned long long next_graph = 0x6a0000ULL;

/* Like NVIDIA's runtime: the driver is initialised on the first call. */
int cuInit(unsigned int flags);
static int initialised;
static void lazy_init(void)
{
	if (!initialised) {
		initialised = 1;
		cuInit(0);
	}
}

int cudaMalloc(void **devPtr, size_t size)
{
	CUdeviceptr d = 0;
	int r;

	lazy_init();
	r = cuMemAlloc_v2(&d, size);

	if (r)
		return 2; /* cudaErrorMemoryAllocation */
	*devPtr = (void *)d;
	return 0;
}

int cudaFree(void *devPtr) { return cuMemFree_v2((CUdeviceptr)devPtr) ? 1 : 0; }

int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, void *stream)
{
	int r;

	lazy_init();
	standin_api_begin(1, "cudaLaunchKernel");
	r = cuLaunchKernel((void *)func, grid.x, grid.y, grid.z, block.x, block.y, block.z,
			   (unsigned int)shmem, stream, args, NULL) ? 98 : 0;
	standin_api_end();
	return r;
}

int cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind, void *stream)
{
	int r = 0;

	lazy_init();
	standin_api_begin(1, "cudaMemcpyAsync");
	if (kind == 1)
		r = cuMemcpyHtoDAsync_v2((CUdeviceptr)dst, src, count, stream);
	else if (kind == 2)
		r = cuMemcpyDtoHAsync_v2(dst, (CUdeviceptr)src, count, stream);
	standin_api_end();
	return r;
}

int cudaDeviceSynchronize(void) { return cuCtxSynchronize(); }
int cudaStreamBeginCapture(void *stream, int mode) { return stream && mode >= 0 ? 0 : 1; }

int cudaStreamEndCapture(void *stream, void **pGraph)
{
	next_graph += 0x100;
	*pGraph = (void *)(next_graph + ((unsigned long long)stream & 0xff));
	return 0;
}

int cudaGraphInstantiate(void **pGraphExec, void *graph, unsigned long long flags)
{
	*pGraphExec = (char *)graph + 0x10000 + flags;
	return 0;
}

int cudaGraphLaunch(void *exec, void *stream) { return cuGraphLaunch(exec, stream); }
