"""ioctl family: request naming (unit) and real recordings on devices this machine has.

No NVIDIA GPU here: NVIDIA decoding is checked against the published numbers,
and end to end through stand-in device nodes named like NVIDIA's (mknod of
/dev/null's numbers), whose ioctls fail with ENOTTY after BPF has read them.
"""
import sys
import textwrap

import pytest

from timeline.kctx.devices import S_IFCHR, S_IFIFO, S_IFSOCK, file_path
from timeline.kctx.ioctl_names import generic_name, ioc_decode, nvidia_name
from timeline.trace_processor import open_trace
from helpers import require_root, timeline_cmd


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


# A pty (TCGETS, TIOCGWINSZ), /dev/null (ENOTTY), and stand-ins for NVIDIA nodes.
WORKLOAD = textwrap.dedent("""
    import fcntl, os, struct, sys, termios
    d = sys.argv[1]
    m, s = os.openpty()
    termios.tcgetattr(s)
    fcntl.ioctl(s, termios.TIOCGWINSZ, b"\\0" * 8)
    null = os.open("/dev/null", os.O_RDWR)
    def bad(fd, req, arg):
        try:
            fcntl.ioctl(fd, req, arg)
        except OSError as e:
            assert e.errno == 25, e
    bad(null, termios.TCGETS, b"\\0" * 64)
    for name in ("nvidiactl", "nvidia-uvm"):
        os.mknod(os.path.join(d, name), 0o600 | 0o020000, os.makedev(1, 3))
    ctl = os.open(os.path.join(d, "nvidiactl"), os.O_RDWR)
    ctrl = bytearray(struct.pack("<IIIIQII", 1, 2, 0x20800A0B, 0, 0, 0, 0))
    bad(ctl, 0xC020462A, ctrl)                                    # NV_ESC_RM_CONTROL
    bad(ctl, 0xC030462B, struct.pack("<IIII", 1, 2, 3, 0xC36F) + b"\\0" * 32)  # NV_ESC_RM_ALLOC
    inner = bytearray(struct.pack("<IIIIQII", 1, 2, 0x0000013F, 0, 0, 0, 0))
    import ctypes
    buf = (ctypes.c_char * len(inner)).from_buffer(inner)
    bad(ctl, 0xC01046D3, struct.pack("<IIQ", 0x2A, len(inner), ctypes.addressof(buf)))  # XFER
    uvm = os.open(os.path.join(d, "nvidia-uvm"), os.O_RDWR)
    bad(uvm, 0x30000001, b"\\0" * 16)                              # UVM_INITIALIZE
    print("ptsname", os.ttyname(s), flush=True)
""")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    require_root()
    out = {}
    for mode in ("all", "gpu"):
        d = tmp_path_factory.mktemp(f"ioctl-{mode}")
        path = str(d / "t.pftrace")
        cp = timeline_cmd("record", "-e", "sched,ioctl", "--ioctl", mode, "-o", path, "--",
                          sys.executable, "-c", WORKLOAD, str(d))
        assert cp.returncode == 0, cp.stderr
        pts = cp.stdout.split("ptsname ", 1)[1].split()[0]
        out[mode] = (open_trace(path), cp, pts)
    yield out
    for tp, _, _ in out.values():
        tp.close()


def _ioctls(tp):
    q = tp.query("""select s.name, t.tid, extract_arg(s.arg_set_id, 'debug.fd'), extract_arg(s.arg_set_id, 'debug.path'),
                           extract_arg(s.arg_set_id, 'debug.request'), extract_arg(s.arg_set_id, 'debug.ret'),
                           extract_arg(s.arg_set_id, 'debug.rm_cmd'), extract_arg(s.arg_set_id, 'debug.rm_class'),
                           extract_arg(s.arg_set_id, 'debug.dir'), extract_arg(s.arg_set_id, 'debug.type'),
                           extract_arg(s.arg_set_id, 'debug.nr'), extract_arg(s.arg_set_id, 'debug.size'), s.dur
                    from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
                    where s.cat = 'ioctl'""")
    return q.rows


def test_all_mode_names_generic_ioctls_and_paths(traces):
    tp, _, pts = traces["all"]
    rows = _ioctls(tp)
    by = {}
    for r in rows:
        by.setdefault((r[0], r[3]), []).append(r)
    tcgets = by[("ioctl(TCGETS)", pts)][0]
    assert tcgets[5] == 0 and tcgets[4] == "0x5401" and tcgets[2] >= 0
    assert tcgets[8:12] == ("none", "T", 1, 0)
    assert by[("ioctl(TIOCGWINSZ)", pts)][0][5] == 0
    null = by[("ioctl(TCGETS)", "/dev/null")][0]
    assert null[5] == -25  # ENOTTY
    assert all(r[12] >= 0 for r in rows)


@pytest.mark.parametrize("mode", ["all", "gpu"])
def test_nvidia_requests_decoded(traces, mode):
    tp, _, _ = traces[mode]
    nv = [r for r in _ioctls(tp) if r[3] and r[3].endswith(("/nvidiactl", "/nvidia-uvm"))]
    names = {(r[0], r[6], r[7]) for r in nv}
    assert ("NV_ESC_RM_CONTROL", "0x20800a0b", None) in names
    assert ("NV_ESC_RM_ALLOC", None, "0xc36f") in names
    assert ("NV_ESC_RM_CONTROL", "0x13f", None) in names  # unwrapped from NV_ESC_IOCTL_XFER_CMD
    assert ("UVM_INITIALIZE", None, None) in names
    assert all(r[5] == -25 for r in nv)


def test_gpu_mode_records_only_nvidia_and_counts_the_rest(traces):
    tp, cp, _ = traces["gpu"]
    rows = _ioctls(tp)
    assert rows and all(r[0].startswith(("NV_ESC", "UVM_")) for r in rows)
    assert "ioctls on non-NVIDIA files counted, not recorded" in cp.stderr
    (total,) = tp.query("""select max(c.value) from counter c join process_counter_track t on c.track_id = t.id
                           where t.name = 'ioctl.other_calls'""").rows[0]
    assert total >= 3  # TCGETS, TIOCGWINSZ on the pty, TCGETS on /dev/null
    summary = tp.query("""select extract_arg(arg_set_id, 'debug.TCGETS'), extract_arg(arg_set_id, 'debug.total')
                          from slice where cat = 'ioctl_summary' and name = 'ioctl counts'""").rows
    assert any(r[0] and r[0] >= 2 and r[1] >= 3 for r in summary)
