"""ioctl family: request naming (unit) and real recordings on devices this machine has.

No NVIDIA GPU here: NVIDIA decoding is checked against the published numbers,
and end to end through stand-in device nodes named like NVIDIA's (mknod of
/dev/null's numbers), whose ioctls fail with ENOTTY after BPF has read them.
"""
import pytest

from timeline.kctx.devices import S_IFCHR, S_IFIFO, S_IFSOCK, file_path
from timeline.kctx.ioctl_names import generic_name, ioc_decode, nvidia_name


def _iowr(t, nr, size):
    return (3 << 30) | (size << 16) | (ord(t) << 8) | nr


@pytest.mark.parametrize("request_,esc,uvm,name", [
    (0xC020462A, 0, False, "NV_ESC_RM_CONTROL"),         # _IOWR('F', 0x2A, NVOS54_PARAMETERS (32 B))
    (0xC030462B, 0, False, "NV_ESC_RM_ALLOC"),           # _IOWR('F', 0x2B, NVOS64_PARAMETERS (48 B))
    (0xC0104629, 0, False, "NV_ESC_RM_FREE"),            # _IOWR('F', 0x29, NVOS00_PARAMETERS (16 B))
    (_iowr("F", 0x4E, 56), 0, False, "NV_ESC_RM_MAP_MEMORY"),
    (_iowr("F", 200, 8), 0, False, "NV_ESC_CARD_INFO"),  # NV_IOCTL_BASE + 0
    (_iowr("F", 201, 4), 0, False, "NV_ESC_REGISTER_FD"),
    (_iowr("F", 210, 8), 0, False, "NV_ESC_CHECK_VERSION_STR"),
    (_iowr("F", 211, 16), 0x2A, False, "NV_ESC_RM_CONTROL"),  # XFER wrapping a control call
    (_iowr("F", 0x7E, 8), 0, False, "NV_ESC_0x7e"),
    (0x30000001, 0, True, "UVM_INITIALIZE"),
    (0x30000002, 0, True, "UVM_DEINITIALIZE"),
    (1, 0, True, "UVM_RESERVE_VA"),
    (25, 0, True, "UVM_REGISTER_GPU_VASPACE"),
    (33, 0, True, "UVM_MAP_EXTERNAL_ALLOCATION"),
    (37, 0, True, "UVM_REGISTER_GPU"),
    (51, 0, True, "UVM_MIGRATE"),
    (71, 0, True, "UVM_POPULATE_PAGEABLE"),
    (75, 0, True, "UVM_MM_INITIALIZE"),
    (8, 0, True, "UVM_IOCTL_8"),
    (0x5401, 0, False, "ioctl(TCGETS)"),                  # not 'F': generic even on an NVIDIA node
])
def test_nvidia_names(request_, esc, uvm, name):
    assert nvidia_name(request_, esc, uvm) == name


def test_generic_decode():
    assert generic_name(0x5413) == "ioctl(TIOCGWINSZ)"
    assert generic_name(0x12345678) == "ioctl"
    assert ioc_decode(0x80045430) == {"dir": "R", "type": "T", "nr": 0x30, "size": 4}  # TIOCGPTN
    assert ioc_decode(0x5401) == {"dir": "none", "type": "T", "nr": 1, "size": 0}
    assert ioc_decode(0xC020462A)["dir"] == "RW"


def test_file_paths():
    devs = {"1:3": "/dev/null", "195:255": "/dev/nvidiactl"}
    assert file_path(S_IFCHR | 0o666, 1 << 20 | 3, 5, "null", "/", devs) == "/dev/null"
    assert file_path(S_IFCHR, 195 << 20 | 255, 9, "nvidiactl", "/", devs) == "/dev/nvidiactl"
    assert file_path(S_IFCHR, 136 << 20 | 4, 7, "4", "/", devs) == "/dev/pts/4"
    # same numbers as /dev/null, but another node: keeps its own name
    assert file_path(S_IFCHR, 1 << 20 | 3, 8, "nvidiactl", "ioctl0", devs) == "…/ioctl0/nvidiactl"
    assert file_path(S_IFSOCK, 0, 1234, "", "", devs) == "socket:[1234]"
    assert file_path(S_IFIFO, 0, 99, "", "", devs) == "pipe:[99]"
    assert file_path(0, 0, 3, "[eventfd]", "/", devs) == "anon_inode:[eventfd]"
