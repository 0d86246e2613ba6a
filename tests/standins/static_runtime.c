/*
 * STAND-IN, tests only: the CUDA runtime that cuBLAS and cuDNN link into
 * themselves.  Its launch is reported to (stand-in) CUPTI as the runtime call
 * cudaLaunchKernel and made through the driver API (cuLaunchKernel), like
 * NVIDIA's; it exports no CUDA name, so no uprobe sees the runtime call, only
 * the driver call inside it.
 */
#include <stddef.h>

int cuInit(unsigned int flags);
int cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
		   unsigned int by, unsigned int bz, unsigned int shmem, void *stream, void **params, void **extra);
void standin_api_begin(int runtime, const char *name);
void standin_api_end(void);

static int initialised;

/* cuBLAS launches from deep inside itself: its driver call sits deeper on
 * the stack than a runtime launch its caller made just before. */
static __attribute__((noinline)) int launch_deep(void *fn, void *stream)
{
	volatile char scratch[512];

	scratch[0] = 0;
	return cuLaunchKernel(fn, 4, 1, 1, 128, 1, 1, 0, stream, NULL, NULL) + scratch[0];
}

/* A library call that launches one kernel (a GEMM, say) through its own runtime. */
int standin_library_gemm(void *fn, void *stream)
{
	int r;

	if (!initialised) {
		initialised = 1;
		cuInit(0);
	}
	standin_api_begin(1, "cudaLaunchKernel");
	r = launch_deep(fn, stream) ? 98 : 0;
	standin_api_end();
	return r;
}
