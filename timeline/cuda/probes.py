"""The functions timeline probes in CUDA runtime, driver and NCCL libraries.

Each Probe names an exported function, what the BPF side must copy (stack
slots, a launch config struct, a value returned through a pointer, a string)
and how user space turns the raw argument slots into slice args.  The probe id
travels in the attach cookie (see TL_CK_* in timeline/cuda/records.h); the raw
log stores the id -> name table, so a log stays readable if this list changes.

Argument slots (x86-64 SysV): 0-5 = rdi rsi rdx rcx r8 r9, 6-8 = [sp+8],
[sp+16], [sp+24] with `stack`, or 4-8 = the 40 bytes of the launch config
pointed to by arg 0 with `config`.  "out" = the value read through the `out`
pointer argument at return.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from . import records as cuda_records

RUNTIME, DRIVER, NCCL = "runtime", "driver", "nccl"
CATEGORY = {RUNTIME: "cuda", DRIVER: "cuda_driver", NCCL: "nccl"}


class Role(str, Enum):
    """What the converter does with a probe beyond a slice (see converter.py).
    A member, not a bare string: a misspelt role fails at import, not by
    silently missing the converter's branch."""
    NONE = ""
    LAUNCH_RT = "launch_rt"
    LAUNCH_CFG = "launch_cfg"
    LAUNCH_CU = "launch_cu"
    COPY = "copy"
    COPY2D = "copy2d"
    COPY_PEER = "copy_peer"
    ALLOC_DEV = "alloc_dev"
    ALLOC_HOST = "alloc_host"
    FREE_DEV = "free_dev"
    FREE_HOST = "free_host"
    CAPTURE_BEGIN = "capture_begin"
    CAPTURE_END = "capture_end"
    INSTANTIATE = "instantiate"
    GRAPH_LAUNCH = "graph_launch"
    REGISTER_FUNCTION = "register_function"
    KERNEL_HANDLE = "kernel_handle"
    FUNCTION_NAME = "function_name"
    COMM_INIT = "comm_init"
    COMM_SPLIT = "comm_split"
    COLLECTIVE = "collective"
    PROFILER_START = "profiler_start"   # --capture-range cudaProfilerApi: recording on
    PROFILER_STOP = "profiler_stop"     # ... and off


@dataclass(frozen=True)
class Probe:
    name: str
    api: str
    role: Role = Role.NONE              # what the converter does beyond a slice (see converter.py)
    fields: tuple = ()                  # (arg key, slot, format) decoded generically
    stack: bool = False
    config: bool = False
    out: int | None = None              # argument index of the result pointer
    string: int | None = None           # argument index of a C string to copy
    launch: bool = False
    nested_drop: bool = True            # driver only: drop when inside a traced runtime call
    id: int = 0

    def cookie(self) -> int:
        ck = self.id
        if self.out is not None:
            ck |= (self.out + 1) << cuda_records.CK_OUT_SHIFT
        if self.string is not None:
            ck |= (self.string + 1) << cuda_records.CK_STR_SHIFT
        if self.api == RUNTIME:
            ck |= cuda_records.CK_RUNTIME
        if self.api == DRIVER and self.nested_drop:
            ck |= cuda_records.CK_DRIVER
        if self.stack:
            ck |= cuda_records.CK_STACK
        if self.config:
            ck |= cuda_records.CK_CONFIG
        if self.launch:
            ck |= cuda_records.CK_LAUNCH
        return ck


def _f(spec: str) -> tuple:
    """'dst=0:hex src=1:hex' -> (('dst', 0, 'hex'), ('src', 1, 'hex'))."""
    out = []
    for item in spec.split():
        key, rest = item.split("=")
        slot, fmt = rest.split(":")
        out.append((key, slot if slot in ("out", "const") else int(slot), fmt))
    return tuple(out)


def _table() -> list[Probe]:
    P: list[Probe] = []

    def add(names, api, role: Role = Role.NONE, fields="", **kw):
        for name in names.split():
            P.append(Probe(name, api, Role(role), _f(fields), **kw))

    # -- CUDA runtime (libcudart) ------------------------------------------
    R = RUNTIME
    add("cudaLaunchKernel cudaLaunchKernel_ptsz cudaLaunchCooperativeKernel cudaLaunchCooperativeKernel_ptsz",
        R, Role.LAUNCH_RT, "shmem=6:u64 stream=7:hex", stack=True, launch=True)
    add("cudaLaunchKernelExC cudaLaunchKernelExC_ptsz", R, Role.LAUNCH_CFG, "shmem=7:u64 stream=8:hex",
        config=True, launch=True)
    add("cudaMemcpy cudaMemcpy_ptds", R, Role.COPY, "dst=0:hex src=1:hex bytes=2:u64 kind=3:kind")
    add("cudaMemcpyAsync cudaMemcpyAsync_ptsz", R, Role.COPY,
        "dst=0:hex src=1:hex bytes=2:u64 kind=3:kind stream=4:hex")
    add("cudaMemcpy2D cudaMemcpy2D_ptds", R, Role.COPY2D,
        "dst=0:hex dpitch=1:u64 src=2:hex spitch=3:u64 width=4:u64 height=5:u64 kind=6:kind", stack=True)
    add("cudaMemcpy2DAsync cudaMemcpy2DAsync_ptsz", R, Role.COPY2D,
        "dst=0:hex dpitch=1:u64 src=2:hex spitch=3:u64 width=4:u64 height=5:u64 kind=6:kind stream=7:hex",
        stack=True)
    add("cudaMemcpyPeer", R, Role.COPY_PEER, "dst=0:hex dst_device=1:i32 src=2:hex src_device=3:i32 bytes=4:u64")
    add("cudaMemcpyPeerAsync", R, Role.COPY_PEER,
        "dst=0:hex dst_device=1:i32 src=2:hex src_device=3:i32 bytes=4:u64 stream=5:hex")
    add("cudaMemset cudaMemset_ptds", R, "", "ptr=0:hex value=1:i32 bytes=2:u64")
    add("cudaMemsetAsync cudaMemsetAsync_ptsz", R, "", "ptr=0:hex value=1:i32 bytes=2:u64 stream=3:hex")
    add("cudaMalloc", R, Role.ALLOC_DEV, "size=1:u64 ptr=out:hex", out=0)
    add("cudaMallocManaged", R, Role.ALLOC_DEV, "size=1:u64 flags=2:u32 ptr=out:hex", out=0)
    add("cudaMallocAsync cudaMallocAsync_ptsz", R, Role.ALLOC_DEV, "size=1:u64 stream=2:hex ptr=out:hex", out=0)
    add("cudaMallocHost", R, Role.ALLOC_HOST, "size=1:u64 ptr=out:hex", out=0)
    add("cudaHostAlloc", R, Role.ALLOC_HOST, "size=1:u64 flags=2:u32 ptr=out:hex", out=0)
    add("cudaFree", R, Role.FREE_DEV, "ptr=0:hex")
    add("cudaFreeAsync cudaFreeAsync_ptsz", R, Role.FREE_DEV, "ptr=0:hex stream=1:hex")
    add("cudaFreeHost", R, Role.FREE_HOST, "ptr=0:hex")
    add("cudaStreamSynchronize cudaStreamSynchronize_ptsz", R, "", "stream=0:hex")
    add("cudaDeviceSynchronize", R)
    add("cudaEventSynchronize", R, "", "event=0:hex")
    add("cudaStreamWaitEvent cudaStreamWaitEvent_ptsz", R, "", "stream=0:hex event=1:hex flags=2:u32")
    add("cudaEventRecord cudaEventRecord_ptsz", R, "", "event=0:hex stream=1:hex")
    add("cudaEventRecordWithFlags cudaEventRecordWithFlags_ptsz", R, "", "event=0:hex stream=1:hex flags=2:u32")
    add("cudaStreamBeginCapture cudaStreamBeginCapture_ptsz", R, Role.CAPTURE_BEGIN, "stream=0:hex mode=1:i32")
    add("cudaStreamEndCapture cudaStreamEndCapture_ptsz", R, Role.CAPTURE_END, "stream=0:hex graph=out:hex", out=1)
    add("cudaGraphInstantiate cudaGraphInstantiateWithFlags", R, Role.INSTANTIATE,
        "graph=1:hex flags=2:u64 exec=out:hex", out=0)
    add("cudaGraphLaunch cudaGraphLaunch_ptsz", R, Role.GRAPH_LAUNCH, "exec=0:hex stream=1:hex", launch=True)
    add("cudaSetDevice", R, "", "device=0:i32")
    add("cudaProfilerStart", R, Role.PROFILER_START)
    add("cudaProfilerStop", R, Role.PROFILER_STOP)
    add("cudaGetDeviceCount", R, "", "count=out:i32", out=0)
    add("cudaStreamQuery cudaStreamQuery_ptsz", R, "", "stream=0:hex")  # 600 = not ready: polling
    add("cudaEventQuery", R, "", "event=0:hex")
    # Kernel names for runtime launches.  nvcc's registration code tells the
    # runtime which host symbol stands for which device function (mangled
    # name); launches pass that symbol, which need not be code in a mapped
    # file (torch 2.11/CUDA 13 passes heap addresses), so ELF symbols alone
    # cannot name it.  Handles derived from a symbol map back to it.
    add("__cudaRegisterFunction", R, Role.REGISTER_FUNCTION, "host_fun=1:hex device_name=3:hex")
    add("__cudaGetKernel cudaGetKernel", R, Role.KERNEL_HANDLE, "entry=1:hex kernel=out:hex", out=0)
    add("cudaGetFuncBySymbol", R, Role.KERNEL_HANDLE, "entry=1:hex function=out:hex", out=0)

    # -- CUDA driver (libcuda) ---------------------------------------------
    D = DRIVER
    add("cuLaunchKernel cuLaunchKernel_ptsz cuLaunchCooperativeKernel cuLaunchCooperativeKernel_ptsz",
        D, Role.LAUNCH_CU, "shmem=7:u32 stream=8:hex", stack=True, launch=True)
    add("cuLaunchKernelEx cuLaunchKernelEx_ptsz", D, Role.LAUNCH_CFG, "shmem=7:u32 stream=8:hex",
        config=True, launch=True)
    add("cuGraphLaunch cuGraphLaunch_ptsz", D, Role.GRAPH_LAUNCH, "exec=0:hex stream=1:hex", launch=True)
    add("cuMemAlloc_v2", D, Role.ALLOC_DEV, "size=1:u64 ptr=out:hex", out=0)
    add("cuMemAllocAsync cuMemAllocAsync_ptsz", D, Role.ALLOC_DEV, "size=1:u64 stream=2:hex ptr=out:hex", out=0)
    add("cuMemAllocManaged", D, Role.ALLOC_DEV, "size=1:u64 flags=2:u32 ptr=out:hex", out=0)
    add("cuMemAllocHost_v2", D, Role.ALLOC_HOST, "size=1:u64 ptr=out:hex", out=0)
    add("cuMemHostAlloc", D, Role.ALLOC_HOST, "size=1:u64 flags=2:u32 ptr=out:hex", out=0)
    add("cuMemFree_v2", D, Role.FREE_DEV, "ptr=0:hex")
    add("cuMemFreeAsync cuMemFreeAsync_ptsz", D, Role.FREE_DEV, "ptr=0:hex stream=1:hex")
    add("cuMemFreeHost", D, Role.FREE_HOST, "ptr=0:hex")
    for direction, kind in (("HtoD", "H2D"), ("DtoH", "D2H"), ("DtoD", "D2D")):
        add(f"cuMemcpy{direction}_v2 cuMemcpy{direction}_v2_ptds", D, Role.COPY,
            f"dst=0:hex src=1:hex bytes=2:u64 kind=const:{kind}")
        add(f"cuMemcpy{direction}Async_v2 cuMemcpy{direction}Async_v2_ptsz", D, Role.COPY,
            f"dst=0:hex src=1:hex bytes=2:u64 kind=const:{kind} stream=3:hex")
    add("cuMemcpy cuMemcpy_ptds", D, Role.COPY, "dst=0:hex src=1:hex bytes=2:u64 kind=const:default")
    add("cuMemcpyAsync cuMemcpyAsync_ptsz", D, Role.COPY, "dst=0:hex src=1:hex bytes=2:u64 kind=const:default stream=3:hex")
    # cuBLAS/cuDNN call the runtime statically linked into them (no uprobe can
    # see it), so their memsets reach us only here.
    add("cuMemsetD8_v2 cuMemsetD8_v2_ptds cuMemsetD16_v2 cuMemsetD16_v2_ptds cuMemsetD32_v2 cuMemsetD32_v2_ptds",
        D, "", "ptr=0:hex value=1:u32 count=2:u64")
    add("cuMemsetD8Async cuMemsetD8Async_ptsz cuMemsetD16Async cuMemsetD16Async_ptsz cuMemsetD32Async "
        "cuMemsetD32Async_ptsz", D, "", "ptr=0:hex value=1:u32 count=2:u64 stream=3:hex")
    add("cuCtxSynchronize", D)
    add("cuProfilerStart", D, Role.PROFILER_START)
    add("cuProfilerStop", D, Role.PROFILER_STOP)
    add("cuStreamSynchronize cuStreamSynchronize_ptsz", D, "", "stream=0:hex")
    add("cuEventSynchronize", D, "", "event=0:hex")
    add("cuStreamWaitEvent cuStreamWaitEvent_ptsz", D, "", "stream=0:hex event=1:hex flags=2:u32")
    add("cuEventRecord cuEventRecord_ptsz", D, "", "event=0:hex stream=1:hex")
    add("cuStreamQuery cuStreamQuery_ptsz", D, "", "stream=0:hex")
    add("cuEventQuery", D, "", "event=0:hex")
    # Kernel handles -> names for driver launches (Triton).  Not dropped when
    # nested: the runtime's lazy module loading is worth seeing.
    add("cuModuleGetFunction cuLibraryGetKernel", D, Role.FUNCTION_NAME, "module=1:hex function=out:hex",
        out=0, string=2, nested_drop=False)
    # CUkernel -> CUfunction (cuBLASLt's CUTLASS kernels are launched this way).
    add("cuKernelGetFunction", D, Role.KERNEL_HANDLE, "kernel=1:hex function=out:hex", out=0, nested_drop=False)

    # -- NCCL (libnccl) --------------------------------------------------------
    N = NCCL
    add("ncclAllReduce ncclReduceScatter", N, Role.COLLECTIVE,
        "sendbuff=0:hex recvbuff=1:hex count=2:u64 datatype=3:dtype op=4:op comm=5:hex stream=6:hex", stack=True)
    add("ncclAllGather", N, Role.COLLECTIVE,
        "sendbuff=0:hex recvbuff=1:hex count=2:u64 datatype=3:dtype comm=4:hex stream=5:hex")
    add("ncclBroadcast", N, Role.COLLECTIVE,
        "sendbuff=0:hex recvbuff=1:hex count=2:u64 datatype=3:dtype root=4:i32 comm=5:hex stream=6:hex",
        stack=True)
    add("ncclBcast", N, Role.COLLECTIVE, "buff=0:hex count=1:u64 datatype=2:dtype root=3:i32 comm=4:hex stream=5:hex")
    add("ncclReduce", N, Role.COLLECTIVE,
        "sendbuff=0:hex recvbuff=1:hex count=2:u64 datatype=3:dtype op=4:op root=5:i32 comm=6:hex stream=7:hex",
        stack=True)
    add("ncclSend", N, Role.COLLECTIVE, "sendbuff=0:hex count=1:u64 datatype=2:dtype peer=3:i32 comm=4:hex stream=5:hex")
    add("ncclRecv", N, Role.COLLECTIVE, "recvbuff=0:hex count=1:u64 datatype=2:dtype peer=3:i32 comm=4:hex stream=5:hex")
    add("ncclGroupStart ncclGroupEnd", N)
    # ncclUniqueId (128 bytes) is passed in memory, so rank lands in rdx.
    add("ncclCommInitRank", N, Role.COMM_INIT, "nranks=1:i32 comm_rank=2:i32 comm=out:hex", out=0)
    add("ncclCommInitRankConfig", N, Role.COMM_INIT, "nranks=1:i32 comm_rank=2:i32 config=3:hex comm=out:hex", out=0)
    add("ncclCommInitAll", N, "", "comms=0:hex ndev=1:i32 devlist=2:hex")
    add("ncclCommSplit", N, Role.COMM_SPLIT, "parent=0:hex color=1:i32 key=2:i32 comm=out:hex", out=3)
    add("ncclCommDestroy ncclCommAbort ncclCommFinalize", N, "", "comm=0:hex")

    return [Probe(**{**p.__dict__, "id": i}) for i, p in enumerate(P)]


PROBES: list[Probe] = _table()
BY_NAME: dict[str, Probe] = {p.name: p for p in PROBES}
APIS = (RUNTIME, DRIVER, NCCL)
assert len(PROBES) <= cuda_records.CK_ID_MASK + 1


def probes_for(api: str) -> list[Probe]:
    return [p for p in PROBES if p.api == api]


def table_meta() -> list[str]:
    """id -> name, for the raw log (the converter maps ids through it)."""
    return [p.name for p in PROBES]
