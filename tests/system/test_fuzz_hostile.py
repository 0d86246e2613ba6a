"""Fuzz the recorder's inputs from the target and the CLI's arguments (issue 16).

Deterministic seeds, a few seconds per case. The recording must always end
with a trace that trace_processor loads; every error is one line."""
from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from helpers import REPO, require_root
from rawlog_factory import scenario
from timeline.trace_processor import open_trace

# The target: from a seed, renames threads to odd bytes, forks and execs with odd
# argv, and maps files whose names hold newlines, invalid UTF-8 or 255 bytes.
TARGET = r'''
import ctypes, mmap, os, random, sys, threading, time
rng = random.Random(int(sys.argv[1]))
libc = ctypes.CDLL(None)
d = sys.argv[2].encode()
def odd(n):
    pool = [b"\x1b[31m", b"\x1b]0;T\x07", b"\xff", b"\xc3", b"\n", b"\t", b"", b"\xe2\x80\xae", b"a", b"%s"]
    return b"".join(rng.choice(pool) for _ in range(n))[:15]
def renamer():
    for _ in range(300):
        libc.prctl(15, odd(rng.randint(0, 6)), 0, 0, 0)
keep = []
for i, name in enumerate([b"nl\nname", b"bad\xff\xfe", b"x" * 250, b"esc\x1b]0;P\x07", b" lead space"]):
    p = os.path.join(d, name + b"%d" % i)
    with open(p, "wb") as f:
        f.write(b"\0" * 4096)
    f = open(p, "rb")
    keep.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ | mmap.PROT_EXEC))
ts = [threading.Thread(target=renamer) for _ in range(4)]
[t.start() for t in ts]
for _ in range(15):
    pid = os.fork()
    if pid == 0:
        libc.prctl(15, odd(4), 0, 0, 0)
        if rng.random() < 0.7:
            os.execv(b"/bin/true", [odd(rng.randint(0, 5)) or b"x"] + [odd(rng.randint(0, 8)) for _ in range(rng.randint(0, 4))])
        os._exit(rng.randint(0, 3))
    os.waitpid(pid, 0)
[t.join() for t in ts]
time.sleep(0.3)
'''


def one_line(err: bytes) -> None:
    text = err.decode("utf-8", "replace")
    assert "Traceback" not in text, text
    assert "\x1b" not in text and "\x07" not in text, text


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_recording_survives_hostile_target(tmp_path, seed):
    require_root()
    prog = tmp_path / "target.py"
    prog.write_text(TARGET)
    out = tmp_path / "t.pftrace"
    res = subprocess.run([sys.executable, "-m", "timeline.cli", "record", "-e", "sched,cuda", "-o", str(out), "--",
                          sys.executable, str(prog), str(seed), str(tmp_path)],
                         capture_output=True, timeout=120, cwd=REPO)
    one_line(res.stderr)
    assert res.returncode == 0, res.stderr.decode("utf-8", "replace")
    tp = open_trace(str(out), engine="wasm", offline=True)
    try:
        n = tp.query("select count(*) from thread").rows[0][0]
        procs = tp.query("select count(*) from process where cmdline is not null").rows[0][0]
    finally:
        tp.close()
    assert n >= 5 and procs >= 10  # the target and its forks, odd names and all


EDGE = ["", "0", "-1", "nan", "inf", "1e309", "2147483648", "99999999999999999999", ",", " ", "\x1b[31m",
        "\udcff", "x" * 300, "/dev/null", "/nonexistent/dir/f", "-", "--", "=", "a=b", "cpu_contention.window_s=0"]
OPTIONS = {
    "record": ["-p", "-d", "--flush-interval", "-o", "--format"],
    "convert": ["-o", "--format"],
    "check": ["--param", "--only", "--format", "--fail-on", "--engine"],
    "query": ["--format", "--engine", "-f"],
}


@pytest.mark.parametrize("cmd", sorted(OPTIONS))
def test_cli_arguments_give_one_line_errors(tmp_path, cmd):
    rng = random.Random(cmd)
    raw = scenario(tmp_path / "a.tlraw")
    subprocess.run([sys.executable, "-m", "timeline.cli", "convert", raw, "-o", str(tmp_path / "a.pftrace")],
                   check=True, capture_output=True, cwd=REPO)
    positional = {"record": ["--", "/bin/true"], "convert": [raw], "check": [str(tmp_path / "a.pftrace")],
                  "query": [str(tmp_path / "a.pftrace"), "select 1"]}[cmd]
    for _ in range(6):
        args = []
        for opt in rng.sample(OPTIONS[cmd], rng.randint(1, 2)):
            args += [opt, rng.choice(EDGE)]
        if cmd == "record":
            args = ["-o", str(tmp_path / "r.pftrace"), *args]
        argv = [os.fsencode(a) for a in [sys.executable, "-m", "timeline.cli", cmd, *args, *positional]]
        res = subprocess.run(argv, capture_output=True, timeout=120, cwd=tmp_path,
                             env={**os.environ, "PYTHONPATH": REPO})
        one_line(res.stderr)
        assert res.returncode in (0, 1, 2), (args, res.returncode, res.stderr)
