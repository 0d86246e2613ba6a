"""Names for ioctl request numbers: NVIDIA RM escapes, UVM commands, generic _IOC.

NVIDIA numbers are facts from the public open-gpu-kernel-modules headers:
- kernel-open/common/inc/nv-ioctl-numbers.h: NV_IOCTL_MAGIC 'F', NV_IOCTL_BASE 200
  and the escapes above it (card info, register fd, xfer, ...);
- src/nvidia/arch/nvalloc/unix/include/nv_escape.h: the RM escapes 0x27..0x5F;
- kernel-open/nvidia-uvm/uvm_ioctl.h: UVM_IOCTL_BASE(i) is plain i on Linux,
  and uvm_linux_ioctl.h: UVM_INITIALIZE 0x30000001, UVM_DEINITIALIZE 0x30000002.
RM requests are _IOWR('F', escape, sizeof(params)), e.g. NV_ESC_RM_CONTROL with
its 32-byte NVOS54_PARAMETERS is 0xc020462a.  UVM requests carry no _IOC bits.
"""
from __future__ import annotations

NV_IOCTL_MAGIC = ord("F")

NV_ESCAPES = {
    0x27: "NV_ESC_RM_ALLOC_MEMORY",
    0x28: "NV_ESC_RM_ALLOC_OBJECT",
    0x29: "NV_ESC_RM_FREE",
    0x2A: "NV_ESC_RM_CONTROL",
    0x2B: "NV_ESC_RM_ALLOC",
    0x32: "NV_ESC_RM_CONFIG_GET",
    0x33: "NV_ESC_RM_CONFIG_SET",
    0x34: "NV_ESC_RM_DUP_OBJECT",
    0x35: "NV_ESC_RM_SHARE",
    0x37: "NV_ESC_RM_CONFIG_GET_EX",
    0x38: "NV_ESC_RM_CONFIG_SET_EX",
    0x39: "NV_ESC_RM_I2C_ACCESS",
    0x41: "NV_ESC_RM_IDLE_CHANNELS",
    0x4A: "NV_ESC_RM_VID_HEAP_CONTROL",
    0x4D: "NV_ESC_RM_ACCESS_REGISTRY",
    0x4E: "NV_ESC_RM_MAP_MEMORY",
    0x4F: "NV_ESC_RM_UNMAP_MEMORY",
    0x52: "NV_ESC_RM_GET_EVENT_DATA",
    0x54: "NV_ESC_RM_ALLOC_CONTEXT_DMA2",
    0x56: "NV_ESC_RM_ADD_VBLANK_CALLBACK",
    0x57: "NV_ESC_RM_MAP_MEMORY_DMA",
    0x58: "NV_ESC_RM_UNMAP_MEMORY_DMA",
    0x59: "NV_ESC_RM_BIND_CONTEXT_DMA",
    0x5C: "NV_ESC_RM_EXPORT_OBJECT_TO_FD",
    0x5D: "NV_ESC_RM_IMPORT_OBJECT_FROM_FD",
    0x5E: "NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO",
    0x5F: "NV_ESC_RM_LOCKLESS_DIAGNOSTIC",
    200: "NV_ESC_CARD_INFO",
    201: "NV_ESC_REGISTER_FD",
    206: "NV_ESC_ALLOC_OS_EVENT",
    207: "NV_ESC_FREE_OS_EVENT",
    209: "NV_ESC_STATUS_CODE",
    210: "NV_ESC_CHECK_VERSION_STR",
    211: "NV_ESC_IOCTL_XFER_CMD",
    212: "NV_ESC_ATTACH_GPUS_TO_FD",
    213: "NV_ESC_QUERY_DEVICE_INTR",
    214: "NV_ESC_SYS_PARAMS",
    217: "NV_ESC_EXPORT_TO_DMABUF_FD",
    218: "NV_ESC_WAIT_OPEN_COMPLETE",
}
# Escapes whose argument names a control command / an object class (see ioctl.bpf.c).
NV_ESC_RM_CONTROL = 0x2A
NV_ALLOC_ESCAPES = (0x28, 0x2B)

_UVM = (
    "RESERVE_VA RELEASE_VA REGION_COMMIT REGION_DECOMMIT REGION_SET_STREAM SET_STREAM_RUNNING "
    "SET_STREAM_STOPPED - RUN_TEST ADD_SESSION REMOVE_SESSION ENABLE_COUNTERS MAP_COUNTER "
    "CREATE_EVENT_QUEUE REMOVE_EVENT_QUEUE MAP_EVENT_QUEUE EVENT_CTRL REGISTER_MPS_SERVER "
    "REGISTER_MPS_CLIENT GET_GPU_UUID_TABLE REGION_SET_BACKING REGION_UNSET_BACKING "
    "CREATE_RANGE_GROUP DESTROY_RANGE_GROUP REGISTER_GPU_VASPACE UNREGISTER_GPU_VASPACE "
    "REGISTER_CHANNEL UNREGISTER_CHANNEL ENABLE_PEER_ACCESS DISABLE_PEER_ACCESS SET_RANGE_GROUP - "
    "MAP_EXTERNAL_ALLOCATION FREE MEM_MAP DEBUG_ACCESS_MEMORY REGISTER_GPU UNREGISTER_GPU "
    "PAGEABLE_MEM_ACCESS PREVENT_MIGRATION_RANGE_GROUPS ALLOW_MIGRATION_RANGE_GROUPS "
    "SET_PREFERRED_LOCATION UNSET_PREFERRED_LOCATION ENABLE_READ_DUPLICATION "
    "DISABLE_READ_DUPLICATION SET_ACCESSED_BY UNSET_ACCESSED_BY - - - MIGRATE - MIGRATE_RANGE_GROUP "
    "ENABLE_SYSTEM_WIDE_ATOMICS DISABLE_SYSTEM_WIDE_ATOMICS TOOLS_INIT_EVENT_TRACKER "
    "TOOLS_SET_NOTIFICATION_THRESHOLD TOOLS_EVENT_QUEUE_ENABLE_EVENTS TOOLS_EVENT_QUEUE_DISABLE_EVENTS "
    "TOOLS_ENABLE_COUNTERS TOOLS_DISABLE_COUNTERS TOOLS_READ_PROCESS_MEMORY TOOLS_WRITE_PROCESS_MEMORY "
    "TOOLS_GET_PROCESSOR_UUID_TABLE MAP_DYNAMIC_PARALLELISM_REGION UNMAP_EXTERNAL TOOLS_FLUSH_EVENTS "
    "ALLOC_SEMAPHORE_POOL CLEAN_UP_ZOMBIE_RESOURCES PAGEABLE_MEM_ACCESS_ON_GPU POPULATE_PAGEABLE "
    "VALIDATE_VA_RANGE CREATE_EXTERNAL_RANGE MAP_EXTERNAL_SPARSE MM_INITIALIZE"
).split()
UVM_COMMANDS = {i + 1: "UVM_" + n for i, n in enumerate(_UVM) if n != "-"}
UVM_COMMANDS.update({0x30000001: "UVM_INITIALIZE", 0x30000002: "UVM_DEINITIALIZE", 2047: "UVM_IS_8_SUPPORTED"})

# Common requests on terminals, files and perf fds (asm-generic/ioctls.h,
# linux/fs.h, linux/perf_event.h): enough to make a generic trace readable.
GENERIC = {
    0x5401: "TCGETS", 0x5402: "TCSETS", 0x5403: "TCSETSW", 0x5404: "TCSETSF", 0x5409: "TCSBRK",
    0x540B: "TCFLSH", 0x540E: "TIOCSCTTY", 0x540F: "TIOCGPGRP", 0x5410: "TIOCSPGRP",
    0x5413: "TIOCGWINSZ", 0x5414: "TIOCSWINSZ", 0x541B: "FIONREAD", 0x5421: "FIONBIO",
    0x5422: "TIOCNOTTY", 0x5441: "TIOCGPTPEER", 0x5450: "FIONCLEX", 0x5451: "FIOCLEX",
    0x5452: "FIOASYNC", 0x80045430: "TIOCGPTN", 0x40045431: "TIOCSPTLCK",
    0x80086601: "FS_IOC_GETFLAGS", 0x40086602: "FS_IOC_SETFLAGS", 0x40049409: "FICLONE",
    0x2400: "PERF_EVENT_IOC_ENABLE", 0x2401: "PERF_EVENT_IOC_DISABLE", 0x2403: "PERF_EVENT_IOC_RESET",
    0x80081272: "BLKGETSIZE64", 0x1268: "BLKSSZGET",
}

_DIRS = ("none", "W", "R", "RW")  # _IOC_WRITE: user writes (kernel reads), _IOC_READ: the reverse


def ioc_decode(request: int) -> dict:
    """The generic _IOC fields (x86/asm-generic layout: nr 8 bits, type 8, size 14, dir 2)."""
    t = (request >> 8) & 0xFF
    return {
        "dir": _DIRS[(request >> 30) & 3],
        "type": chr(t) if 0x20 < t < 0x7F else hex(t),
        "nr": request & 0xFF,
        "size": (request >> 16) & 0x3FFF,
    }


def nvidia_name(request: int, esc: int, is_uvm: bool) -> str:
    """Name of a request made on an NVIDIA device node (esc: the escape BPF
    decoded, the wrapped one for NV_ESC_IOCTL_XFER_CMD)."""
    if is_uvm:
        return UVM_COMMANDS.get(request, f"UVM_IOCTL_{request}")
    if (request >> 8) & 0xFF == NV_IOCTL_MAGIC:
        esc = esc or request & 0xFF
        return NV_ESCAPES.get(esc, f"NV_ESC_{esc:#x}")
    return generic_name(request)


def generic_name(request: int) -> str:
    n = GENERIC.get(request)
    return f"ioctl({n})" if n else "ioctl"
