/*
 * STAND-IN glue, tests only: how the stand-in CUDA driver (cuda_driver.c)
 * and runtime (cuda_runtime.c) report calls and "GPU work" to the stand-in
 * libcupti (cupti.c), as NVIDIA's driver reports to its CUPTI internally.
 * The stand-in libcupti registers itself with standin_driver_set_tracer()
 * when a kind is first enabled.
 */
#ifndef STANDIN_TRACER_H
#define STANDIN_TRACER_H
#include <stdint.h>

struct standin_tracer {
	uint64_t (*now)(void);                          /* the activity clock */
	uint32_t (*next_correlation)(void);
	/* api: function name ("cudaLaunchKernel", "cuLaunchKernel"...), runtime or driver */
	void (*api)(int runtime, const char *name, uint64_t start, uint64_t end, uint32_t corr, uint32_t tid);
	void (*kernel)(uint32_t corr, const char *name, const unsigned grid[3], const unsigned block[3],
		       unsigned shmem, uintptr_t stream, uint32_t graph_id, uint64_t graph_node);
	void (*memcpy)(uint32_t corr, int copy_kind, uint64_t bytes, uintptr_t stream, int peer);
	void (*memset)(uint32_t corr, uint32_t value, uint64_t bytes, uintptr_t stream);
	void (*sync)(uint32_t corr, int type, uintptr_t stream);
};
#endif
