"""What the recorder reads back (issue 20): only through descriptors it holds,
or as the user the target runs as, never blocking on a name the target controls.

Real recordings in sudo mode (root with SUDO_UID/SUDO_GID=65534) with the
target running as nobody; the target swaps the names timeline created for
symlinks to a root-only raw log or for FIFOs, plants names in advance, or
puts a FIFO over a CUDA library in a mount namespace of its own.  Each test
checks that the secret (a marker in a root-only 0600 raw log) reaches no
output, that the recorder ends in bounded time with at most one line about
the problem, and that the trace or raw log is kept.
"""
from __future__ import annotations

import glob
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest

from helpers import NOBODY, REPO, SUDO_NOBODY, read_raw, require_root
from rawlog_factory import LogBuilder, T, end_block

USER_PYTHON = "/usr/bin/python3"  # the target runs as nobody, who cannot reach a Python under /root
MARKER = "ROOT-ONLY-MARKER-5f3a9c"
SECRET_WORLD = 31337  # the secret log's world size: a rank summary read from it would print it
TIMEOUT = 90          # no test may hang: a blocked recorder fails here instead


@pytest.fixture
def secret_raw(tmp_path):
    """A root-only (0600, in a root-only directory) raw log of someone else's
    recording: its command line, a thread name and two ranks carry the marker."""
    b = LogBuilder(ncpu=2, command=("python3", MARKER))
    b.fork(T(10), 0, 999, 999, 1000, 1000, "timeline", "timeline", launched=True)
    b.exec(T(20), 0, 1000, "python3", ["python3", MARKER])
    b.rename(T(30), 0, 1000, 1000, "python3", MARKER[:15])
    b.switch(T(40), 0, 5, 1000, prev_tracked=False)
    b.switch(T(50), 0, 1000, 0, prev_state=1, next_tracked=False)
    b.flush()
    b.blocks.append(("meta", {"type": "ranks", "ts": T(60), "processes": [
        {"pid": 1000, "rank": 7, "world_size": SECRET_WORLD}, {"pid": 1001, "rank": 8, "world_size": SECRET_WORLD}]}))
    path = b.write(str(tmp_path / "secret.tlraw"), end_block(stop_ts=T(100)))
    os.chmod(path, 0o600)
    return path


def sudo_env(**extra):
    env = dict(os.environ, **SUDO_NOBODY, **extra)
    env.pop("TIMELINE_GPU_SOCKET", None)
    return env


def record(*args, env=None, timeout=TIMEOUT) -> subprocess.CompletedProcess:
    """timeline record in sudo mode; bytes out (a leaked secret need not be UTF-8)."""
    return subprocess.run([sys.executable, "-m", "timeline.cli", "record", *args], capture_output=True,
                          timeout=timeout, env=env or sudo_env())


def problem_lines(cp) -> list[str]:
    return [line for line in cp.stderr.decode(errors="replace").splitlines()
            if line.startswith(("timeline: error", "timeline: warning")) or "warning:" in line]


def assert_no_secret(cp, *paths):
    for where in (cp.stdout, cp.stderr):
        assert MARKER.encode() not in where and str(SECRET_WORLD).encode() not in where, cp.stderr
    assert b"Traceback" not in cp.stderr, cp.stderr.decode(errors="replace")
    for p in paths:
        with open(p, "rb") as f:
            assert MARKER.encode() not in f.read(), p


def assert_trace_of(trace: str, raw: str, target_word: str):
    """The trace exists, and its raw log is this recording's (the target's command)."""
    assert os.path.getsize(trace) > 0
    log = read_raw(raw)
    assert target_word in " ".join(log["header"]["command"]) and log["sched"].size > 0


def test_secret_log_would_show_its_marker(secret_raw, tmp_path):
    """The check has teeth: converted, the secret log's trace holds the marker."""
    from timeline.converters import convert
    out = str(tmp_path / "secret.pftrace")
    convert(secret_raw, out)
    with open(out, "rb") as f:
        assert MARKER.encode() in f.read()


# -- the reader itself -------------------------------------------------------------
def test_reader_reads_through_a_descriptor_and_refuses_a_fifo_by_name(tmp_path, secret_raw):
    from timeline.rawlog import BLOCK_HDR, RawLogError, RawLogReader
    fd = os.open(secret_raw, os.O_RDONLY)
    try:
        os.lseek(fd, 5, os.SEEK_SET)
        with RawLogReader(fd, "held") as rd:
            assert rd.header["command"][1] == MARKER and len(list(rd.blocks())) > 1 and rd.finalized
        assert os.lseek(fd, 0, os.SEEK_CUR) == 5  # pread: the descriptor's offset is untouched, and it stays open
    finally:
        os.close(fd)
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    with pytest.raises(RawLogError, match="not a regular file"):  # refused at once, not a blocked open
        RawLogReader(fifo)
    # a block claiming 1 GiB in a small file: damage, without reading (or allocating) past the file
    big = str(tmp_path / "big.tlraw")
    shutil.copy(secret_raw, big)
    with open(big, "ab") as f:
        f.write(BLOCK_HDR.pack(b"RING", 1, 1 << 30, 0, 0) + b"x" * 100)
    with RawLogReader(big) as rd:
        list(rd.blocks())
        assert rd.damage is not None and "truncated block (100 of" in rd.damage.reason


# -- --ring: segments swapped after they appear --------------------------------
SEGMENT_SWAPPER = textwrap.dedent("""
    import os, sys, time
    d, stem, how, secret, delay, seconds = sys.argv[1:7]
    end, seen, swapped, n = time.time() + float(seconds), {}, set(), 0
    while time.time() < end:
        now = time.time()
        for name in os.listdir(d):
            if name.startswith(stem + ".seg") and name not in swapped:
                if now - seen.setdefault(name, now) < float(delay):
                    continue
                tmp = os.path.join(d, ".swap%d" % n)
                n += 1
                os.symlink(secret, tmp) if how == "symlink" else os.mkfifo(tmp)
                os.rename(tmp, os.path.join(d, name))
                swapped.add(name)
        time.sleep(0.002)
    print("swapped", len(swapped), flush=True)
""")


@pytest.mark.parametrize("how,delay", [("symlink", 0), ("symlink", 0.2), ("fifo", 0.2)])
def test_ring_segments_swapped_are_read_through_held_descriptors(udir, secret_raw, how, delay):
    """Swapped at once (while timeline gives it its name) or once written to: a
    symlink to a root-only raw log, or a FIFO, which the exit dump must not read."""
    require_root()
    out, raw = os.path.join(udir, "r.pftrace"), os.path.join(udir, "r.tlraw")
    cp = record("-e", "sched", "--ring", "1s", "--keep-raw", "-o", out, "--", USER_PYTHON, "-c", SEGMENT_SWAPPER,
                udir, "r.tlraw", how, secret_raw, str(delay), "2.5")
    assert cp.returncode == 0, cp.stderr.decode(errors="replace")
    assert int(cp.stdout.split()[-1]) >= 3  # the attack ran: segments were swapped as they appeared
    assert_no_secret(cp, out, raw)
    assert problem_lines(cp) == []
    assert_trace_of(out, raw, "swapped")
    assert not glob.glob(raw + ".seg*")  # the swapped names were removed, as the user


# -- --ring: segment names planted in advance ----------------------------------
# Naps of 2 ms: sched events flow, so segments rotate (a rotation happens when a block is written).
RUN_FOR = ("import sys, time\nend = time.time() + float(sys.argv[1])\n"
           "while time.time() < end: time.sleep(0.002)\nprint('ran', flush=True)")


def _planted(path: str, kind: str, owner: int, secret: str) -> None:
    os.symlink(secret, path) if kind == "symlink" else os.mkfifo(path, 0o666)
    os.lchown(path, owner, owner)


@pytest.mark.parametrize("sticky", [False, True])
def test_ring_segment_names_planted_in_advance(udir, secret_raw, sticky):
    """By the target in its own directory, or by another user (root here) in a
    sticky world-writable one: the segments take other names, nothing planted
    is touched or read, and the recording ends as usual."""
    require_root()
    d = udir
    if sticky:
        d = os.path.join(udir, "sticky")
        os.mkdir(d)
        os.chmod(d, 0o1777)
    owner = 0 if sticky else NOBODY
    planted = {os.path.join(d, "r.tlraw.seg000002"): "symlink", os.path.join(d, "r.tlraw.seg000003"): "fifo"}
    for path, kind in planted.items():
        _planted(path, kind, owner, secret_raw)
    out, raw = os.path.join(d, "r.pftrace"), os.path.join(d, "r.tlraw")
    cp = record("-e", "sched", "--ring", "1s", "--keep-raw", "-o", out, "--", USER_PYTHON, "-c", RUN_FOR, "2")
    assert cp.returncode == 0, cp.stderr.decode(errors="replace")
    assert_no_secret(cp, out, raw)
    assert problem_lines(cp) == []
    assert_trace_of(out, raw, "ran")
    for path, kind in planted.items():  # still what was planted, still its owner's
        st = os.lstat(path)
        assert (stat.S_ISLNK if kind == "symlink" else stat.S_ISFIFO)(st.st_mode) and st.st_uid == owner
    assert os.readlink(os.path.join(d, "r.tlraw.seg000002")) == secret_raw
    assert sorted(glob.glob(raw + ".seg*")) == sorted(planted)  # ours, under other names, removed at the end


LOCKS_ITS_DIRECTORY = textwrap.dedent("""
    import os, sys, time
    d = sys.argv[1]
    def busy(s):
        end = time.time() + s
        while time.time() < end: time.sleep(0.002)
    busy(0.5)
    os.chmod(d, 0o555)  # no new segment can be created for a while
    busy(1.5)
    os.chmod(d, 0o755)
    busy(0.3)
    print("ran", flush=True)
""")


def test_ring_segment_that_cannot_be_created_costs_one_line(udir):
    require_root()
    out, raw = os.path.join(udir, "r.pftrace"), os.path.join(udir, "r.tlraw")
    cp = record("-e", "sched", "--ring", "1s", "--keep-raw", "-o", out, "--", USER_PYTHON, "-c",
                LOCKS_ITS_DIRECTORY, udir)
    err = cp.stderr.decode(errors="replace")
    assert cp.returncode == 0 and b"Traceback" not in cp.stderr, err
    lines = problem_lines(cp)
    assert len(lines) == 1 and "cannot start a new segment" in lines[0] and "ermission denied" in lines[0], err
    assert_trace_of(out, raw, "chmod")


# -- --ring: FIFOs at dump names -----------------------------------------------
# Two processes of the job exit non-zero: each triggers a dump while recording goes on.
TWO_FAILURES = textwrap.dedent("""
    import subprocess, time
    time.sleep(1.2)
    subprocess.run(["/bin/false"])
    time.sleep(1.2)
    subprocess.run(["/bin/false"])
    time.sleep(1.2)
    print("ran", flush=True)
""")


def test_fifo_at_dump_names_is_one_line_each_and_recording_goes_on(udir):
    require_root()
    out, raw = os.path.join(udir, "r.pftrace"), os.path.join(udir, "r.tlraw")
    fifos = [os.path.join(udir, "r.1.tlraw"), os.path.join(udir, "r.2.pftrace")]  # dump 1's raw, dump 2's trace
    for f in fifos:
        os.mkfifo(f, 0o600)
        os.chown(f, NOBODY, NOBODY)
    cp = record("-e", "sched", "--ring", "1s", "--keep-raw", "-o", out, "--", USER_PYTHON, "-c", TWO_FAILURES)
    err = cp.stderr.decode(errors="replace")
    assert cp.returncode == 0, err
    assert_no_secret(cp, out)
    lines = problem_lines(cp)
    assert len(lines) == 2 and all("FIFO" in line for line in lines), lines
    assert "dump 1" in lines[0] and "recording goes on" in lines[0]
    assert "dump 2" in lines[1] and "r.2.tlraw is kept" in lines[1]
    assert read_raw(os.path.join(udir, "r.2.tlraw"))["finalized"]  # the dump whose trace could not be written
    assert all(stat.S_ISFIFO(os.lstat(f).st_mode) for f in fifos)
    assert_trace_of(out, raw, "ran")


# -- the per-rank summary, after the raw log's name was swapped ----------------
RANKS_THEN_SWAP = textwrap.dedent("""
    import os, subprocess, sys, time
    raw, how, secret = sys.argv[1:4]
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"],
                             env=dict(os.environ, RANK=str(r), WORLD_SIZE="2")) for r in (0, 1)]
    for k in kids:
        k.wait()
    tmp = raw + ".swap"
    os.symlink(secret, tmp) if how == "symlink" else os.mkfifo(tmp)
    os.rename(tmp, raw)  # the recorder reads the log back after this
    print("our-own-run", flush=True)
""")


@pytest.mark.parametrize("how", ["symlink", "fifo"])
def test_rank_summary_reads_the_log_it_wrote(udir, secret_raw, how):
    require_root()
    out, raw = os.path.join(udir, "r.pftrace"), os.path.join(udir, "r.tlraw")
    cp = record("-e", "sched", "-o", out, "--", USER_PYTHON, "-c", RANKS_THEN_SWAP, raw, how, secret_raw)
    err = cp.stderr.decode(errors="replace")
    assert cp.returncode == 0, err
    assert_no_secret(cp, out)
    assert problem_lines(cp) == []
    assert "timeline: rank 0/2 (pid" in err and "timeline: rank 1/2 (pid" in err, err
    with open(out, "rb") as f:
        assert USER_PYTHON.encode() in f.read()  # the trace is of this run
    assert not os.path.lexists(raw)  # what was at the raw log's name removed (as the user), nothing else


# -- --capture-range nvtx:NAME: the cut copy swapped while it is converted -----
# The target leaves a helper behind (it outlives the target, as a real attack
# would) that swaps every cut copy for a symlink to the root-only log as soon
# as it appears, then runs NVTX ranges through the stand-in CUDA libraries.
NVTX_ATTACK = textwrap.dedent("""
    import ctypes, os, sys, time
    d, standins, secret, outdir, pidfile, swaplog = sys.argv[1:7]
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # not the recorder's pipes: its caller would wait for them
                os.dup2(null, fd)
            with open(pidfile, "w") as f:
                f.write(str(os.getpid()))
            end, n = time.time() + 60, 0
            while time.time() < end:
                for name in os.listdir(outdir):
                    if "nvtx-cut" in name and not os.path.islink(os.path.join(outdir, name)):
                        tmp = os.path.join(outdir, "swap%d" % n)
                        n += 1
                        os.symlink(secret, tmp)
                        os.rename(tmp, os.path.join(outdir, name))
                        with open(swaplog, "a") as f:
                            f.write(name + "\\n")
                time.sleep(0.0005)
        os._exit(0)
    while not os.path.exists(pidfile):
        time.sleep(0.01)
    sys.path.insert(0, standins)
    from cuda_workload import dim3, load
    rt = load(os.path.join(d, "libcudart.so.12"))
    load(os.path.join(d, "libcuda.so.1"))
    nv = ctypes.CDLL(os.path.join(d, "libnvtx_caller.so"))
    nv.nvtx_push.argtypes = [ctypes.c_char_p]
    dev = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(dev), 1 << 20)
    def launches(grid):
        for _ in range(3):
            rt.cudaLaunchKernel(ctypes.c_void_p(0xf00d), dim3(grid, 1, 1), dim3(32, 1, 1), None, 0, None)
        time.sleep(0.05)
    launches(1)
    nv.nvtx_push(b"train"); launches(2); nv.nvtx_pop()
    launches(3)
    time.sleep(0.5)
    print("done", flush=True)
""")


def test_nvtx_cut_copy_swapped_is_read_through_its_descriptor(udir, secret_raw, tmp_path):
    from standins import build_gpu
    require_root()
    inject = os.path.join(REPO, "timeline", "gpu", "libtimeline_inject.so")
    if subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "test", "-r",
                       inject], capture_output=True).returncode:
        pytest.skip(f"{inject} is not readable by uid {NOBODY} in this checkout (private directory)")
    libs = build_gpu(str(tmp_path / "libs"))
    d = os.path.join(udir, "standins")
    shutil.copytree(os.path.dirname(libs["libcudart.so.12"]), d, symlinks=True)
    standins = os.path.join(REPO, "tests", "standins")
    pidfile, swaplog = os.path.join(udir, "helper.pid"), os.path.join(udir, "swaps.log")
    out = os.path.join(udir, "n.pftrace")
    try:
        cp = record("--capture-range", "nvtx:train", "--cuda-lib", os.path.join(d, "libcudart.so.12"), "-o", out,
                    "--", USER_PYTHON, "-c", NVTX_ATTACK, d, standins, secret_raw, udir, pidfile, swaplog,
                    env=sudo_env(PYTHONPATH=os.environ.get("PYTHONPATH", "")))
    finally:
        if os.path.exists(pidfile):
            os.kill(int(open(pidfile).read()), 9)
    err = cp.stderr.decode(errors="replace")
    assert cp.returncode == 0 and b"done" in cp.stdout, err
    assert "capture range nvtx:train:" in err
    assert os.path.exists(swaplog), "the helper never swapped the cut copy: the test did not attack"
    assert_no_secret(cp, out)
    assert problem_lines(cp) == []
    from timeline.trace_processor import open_trace
    with open_trace(out) as tp:  # this run's window: the launches inside the range
        assert tp.query("select count(*) from slice where name = 'cudaLaunchKernel'").rows[0][0] == 3
    assert not [n for n in os.listdir(udir) if "nvtx-cut" in n]  # the swapped name removed, as the user


# -- the CUDA library scan: a FIFO over libcudart in the target's mount namespace
# In a user and mount namespace of its own, the target mounts a tmpfs at DIR,
# copies the real libcudart there and keeps a descriptor on it, mounts another
# tmpfs over DIR with a FIFO at libcudart.so.12, then execs a Python that
# preloads the library through that descriptor: its maps name
# DIR/libcudart.so.12, which outside is nothing and through /proc/PID/root is
# the FIFO.
FIFO_OVER_CUDART = textwrap.dedent("""
    import os, subprocess, sys
    d, lib = sys.argv[1:3]
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", d], check=True)
    with open(lib, "rb") as src, open(os.path.join(d, "libcudart.so.12"), "wb") as dst:
        dst.write(src.read())
    fd = os.open(os.path.join(d, "libcudart.so.12"), os.O_RDONLY)
    os.set_inheritable(fd, True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", d], check=True)
    os.mkfifo(os.path.join(d, "libcudart.so.12"))
    env = dict(os.environ, LD_PRELOAD=f"/proc/self/fd/{fd}")
    os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(1.5); print('ran', flush=True)"], env)
""")


def test_fifo_over_a_mapped_cuda_library_in_the_targets_mount_namespace(udir):
    require_root()
    import nvidia.cuda_runtime as m
    real = os.path.join(list(m.__path__)[0], "lib", "libcudart.so.12")
    lib = os.path.join(udir, "libcudart.so.12")
    shutil.copy(real, lib)
    os.chmod(lib, 0o644)
    d = os.path.join(udir, "ns")
    os.mkdir(d)
    os.chown(d, NOBODY, NOBODY)
    probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                            "unshare", "-Urm", "true"], capture_output=True)
    if probe.returncode:
        pytest.skip("unprivileged user namespaces are off here")
    out, raw = os.path.join(udir, "c.pftrace"), os.path.join(udir, "c.tlraw")
    cp = record("-e", "sched,cuda", "--keep-raw", "-o", out, "--", "unshare", "-Urm", USER_PYTHON, "-c",
                FIFO_OVER_CUDART, d, lib)
    err = cp.stderr.decode(errors="replace")
    assert cp.returncode == 0 and b"ran" in cp.stdout, err
    assert_no_secret(cp, out, raw)
    lines = problem_lines(cp)
    assert len(lines) == 1 and "root" + d + "/libcudart.so.12" in lines[0] and "FIFO" in lines[0], err
    log = read_raw(raw)
    maps = [m for m in log["metas"] if m.get("type") == "maps"]  # the library was seen, mapped, in its maps
    assert any(e[3] == d + "/libcudart.so.12" for m in maps for e in m["entries"]), maps
    assert os.path.getsize(out) > 0


# -- --ring: the disk fills up ---------------------------------------------------
BUSY = ("import time\nend = time.time() + 3\nwhile time.time() < end: time.sleep(0.0002)\n"
        "print('ran', flush=True)\nraise SystemExit(3)")


@pytest.fixture
def small_fs(udir):
    d = os.path.join(udir, "small")
    os.mkdir(d)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", d], check=True)
    os.chown(d, NOBODY, NOBODY)
    yield d
    subprocess.run(["umount", "-l", d], check=False)


def test_ring_disk_full_ends_with_a_trace_or_one_line_naming_the_segments(small_fs, tmp_path):
    require_root()
    out = os.path.join(small_fs, "r.pftrace")
    cp = record("-e", "sched", "--ring", "2s", "-o", out, "--", USER_PYTHON, "-c", BUSY)
    err = cp.stderr.decode(errors="replace")
    assert b"Traceback" not in cp.stderr and b"ran" in cp.stdout, err
    lines = problem_lines(cp)
    assert lines and "filled up" in lines[0], err
    if cp.returncode == 74:  # no room to gather the ring into one raw log: one line says where it is
        assert len(lines) == 1, lines
        segs = sorted(glob.glob(os.path.join(small_fs, "r.tlraw.seg*")))
        assert segs and segs[0] in lines[0] and segs[-1] in lines[0], (segs, lines)
        later = str(tmp_path / "later.pftrace")
        conv = subprocess.run([sys.executable, "-m", "timeline.cli", "convert", "-q", segs[-1], "-o", later],
                              capture_output=True, text=True, timeout=TIMEOUT)
        assert conv.returncode == 0, conv.stderr
        out = later
    else:  # the ring's last window fitted: the command's own status, and the trace
        assert cp.returncode == 3, err
    from timeline.trace_processor import open_trace
    with open_trace(out) as tp:
        assert tp.query("select count(*) from sched").rows[0][0] > 100
