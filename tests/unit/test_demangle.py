from timeline.demangle import demangle


def test_kernel_names_demangled():
    assert demangle("_Z3addPfS_i") == "add(float*, float*, int)"
    assert demangle("_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastIiEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_").startswith(
        "void at::native::elementwise_kernel<128, 2,")


def test_other_names_unchanged():
    for name in ("ampere_sgemm_128x64_nn", "_Zgarbage", "", "_Z\0x", "ncclDevKernel_AllReduce"):
        assert demangle(name) == name
