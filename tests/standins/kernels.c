/*
 * Fake kernel "host stubs" for tests: functions whose symbols are mangled
 * CUDA kernel names, as nvcc emits them.  Passing their addresses to
 * cudaLaunchKernel lets a test check that timeline names launched kernels.
 * addKernel is exported (.dynsym); scaleKernel is local (.symtab only).
 */
volatile int standin_sink;

void _Z9addKernelPfPKfS1_i(void) { standin_sink = 1; }

/* void scale<float>(float*, float, int) */
static void _Z11scaleKernelIfEvPT_S0_i(void) { standin_sink = 2; }

void *scale_kernel_address(void) { return (void *)_Z11scaleKernelIfEvPT_S0_i; }
