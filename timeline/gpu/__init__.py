"""Family `gpu`: GPU-side activity (kernels, copies, NVTX ranges) from the CUPTI/NVTX injection library (issue 11)."""
