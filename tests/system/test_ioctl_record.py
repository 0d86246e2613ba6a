"""ioctl family: real recordings on devices this machine has, and on stand-in device
nodes named like NVIDIA's. Request naming: tests/unit/test_ioctl.py.
"""
import sys
import textwrap

import pytest

from timeline.trace_processor import open_trace
from helpers import require_root, timeline_cmd


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
