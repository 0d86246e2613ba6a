/*
 * STAND-IN workload loops for bench/gpu_inject_cost.py: many calls from C,
 * so the measured cost is the call path, not Python's ctypes.
 */
#include <stddef.h>
#include <nvtx3/nvToolsExt.h>

typedef struct { unsigned int x, y, z; } dim3;
int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, void *stream);

void launch_loop(int n)
{
	dim3 g = { 1, 1, 1 }, b = { 32, 1, 1 };
	for (int i = 0; i < n; i++)
		cudaLaunchKernel((const void *)0xf00d, g, b, NULL, 0, NULL);
}

void nvtx_loop(int n)
{
	for (int i = 0; i < n; i++) {
		nvtxRangePushA("step");
		nvtxRangePop();
	}
}
