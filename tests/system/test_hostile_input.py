"""The recorded program is untrusted: odd bytes in its names, paths and argv never
stop a recording, and never reach the terminal raw (issue 16)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from helpers import REPO, require_root
from timeline.trace_processor import open_trace

ESC_DIR = "esc\x1b[31mRED\x1b]0;PWNED\x07dir"


def record(tmp_path, *argv, text=True, events=None):
    out = tmp_path / "t.pftrace"
    cmd = [sys.executable, "-m", "timeline.cli", "record", "-o", str(out)]
    cmd += ["-e", events] if events else []
    res = subprocess.run([*cmd, "--", *argv], capture_output=True, timeout=120, cwd=REPO)
    return res, out


def one_query(path, sql):
    tp = open_trace(str(path), engine="wasm", offline=True)
    try:
        return tp.query(sql).rows
    finally:
        tp.close()


def test_mapped_executable_with_non_utf8_name(tmp_path):
    require_root()
    exe = os.path.join(os.fsencode(tmp_path), b"odd\xff\nexe")
    shutil.copy("/bin/true", exe)
    prog = ("import mmap, time\nf = open(%r, 'rb')\n"
            "m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ | mmap.PROT_EXEC)\ntime.sleep(1.5)\n" % exe)
    res, out = record(tmp_path, sys.executable, "-c", prog)
    assert res.returncode == 0, res.stderr.decode()
    assert b"Traceback" not in res.stderr
    assert one_query(out, "select count(*) from thread")[0][0] >= 1


def test_non_utf8_argument_is_recorded(tmp_path):
    require_root()
    res, out = record(tmp_path, b"/bin/echo", b"x\xffy")
    assert res.returncode == 0, res.stderr.decode()
    assert res.stdout == b"x\xffy\n"  # the target got its bytes unchanged
    rows = one_query(out, "select cmdline from process where cmdline like '%echo%'")
    assert any("x\\xffy" in (r[0] or "") for r in rows), rows


def test_pid_with_non_utf8_command_line(tmp_path):
    require_root()
    target = subprocess.Popen([b"/bin/sleep", b"3", b"\xfe"], stderr=subprocess.DEVNULL)
    try:
        out = tmp_path / "p.pftrace"
        res = subprocess.run([sys.executable, "-m", "timeline.cli", "record", "-o", str(out), "-p",
                              str(target.pid), "-d", "0.5"], capture_output=True, timeout=120, cwd=REPO)
    finally:
        target.kill()
        target.wait()
    assert res.returncode == 0, res.stderr.decode()
    assert os.path.getsize(out) > 0


def test_library_path_with_escapes_is_escaped_in_summary(tmp_path):
    require_root()
    import nvidia.cuda_runtime as m
    real = os.path.join(list(m.__path__)[0], "lib", "libcudart.so.12")
    lib = tmp_path / ESC_DIR / "libcudart.so.12"
    lib.parent.mkdir()
    shutil.copy(real, lib)
    prog = f"import ctypes, time\nctypes.CDLL({str(lib)!r})\ntime.sleep(1.5)\n"
    res, out = record(tmp_path, sys.executable, "-c", prog, events="sched,cuda")
    err = res.stderr.decode()
    assert res.returncode == 0, err
    assert "\x1b" not in err and "\x07" not in err
    assert "esc\\x1b[31mRED\\x1b]0;PWNED\\x07dir/libcudart.so.12" in err


def test_thread_name_with_escapes_is_escaped_in_check_and_query(tmp_path):
    require_root()
    prog = ("import threading, time, ctypes\n"
            "def f():\n"
            "    ctypes.CDLL(None).prctl(15, b'w\\x1b]0;T\\x07', 0, 0, 0)\n"
            "    t = time.time()\n"
            "    while time.time() - t < 1.0: pass\n"
            "ts = [threading.Thread(target=f) for _ in range(3)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n")
    res, out = record(tmp_path, sys.executable, "-c", prog, events="sched")
    assert res.returncode == 0, res.stderr.decode()
    q = subprocess.run([sys.executable, "-m", "timeline.cli", "query", str(out), "--engine", "wasm",
                        "select name from thread where name like 'w%'"], capture_output=True, timeout=120, cwd=REPO)
    assert q.returncode == 0, q.stderr.decode()
    assert b"\x1b" not in q.stdout and b"w\\x1b]0;T\\x07" in q.stdout
    # machine formats keep the name exactly
    j = subprocess.run([sys.executable, "-m", "timeline.cli", "query", str(out), "--engine", "wasm", "--format", "json",
                        "select name from thread where name like 'w%'"], capture_output=True, timeout=120, cwd=REPO)
    assert b'"w\\u001b]0;T\\u0007"' in j.stdout
    c = subprocess.run([sys.executable, "-m", "timeline.cli", "check", str(out), "--engine", "wasm", "-v"],
                       capture_output=True, timeout=300, cwd=REPO)
    assert b"\x1b]" not in c.stdout and b"\x07" not in c.stdout, c.stdout
