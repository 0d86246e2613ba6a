"""`timeline record` for real: eBPF attached, target launched or attached to.

These read the raw log directly; tests/system/test_trace_content.py checks what
trace_processor makes of the converted traces.
"""
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from timeline import events, proc_records, sched_records
from helpers import read_raw, require_root, timeline_cmd

pytestmark = pytest.mark.usefixtures("root")


WORKLOAD = textwrap.dedent("""
    import ctypes, os, subprocess, sys, threading, time
    libc = ctypes.CDLL(None)
    def named(name, fn):
        def run():
            libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
            fn()
        t = threading.Thread(target=run); t.start(); return t
    def spin():
        end = time.time() + 0.3
        while time.time() < end: pass
    def nap():
        for _ in range(20): time.sleep(0.005)
    ts = [named("spinner-a", spin), named("spinner-b", spin), named("spinner-c", spin), named("napper", nap)]
    subprocess.run(["sleep", "0.05"])
    for t in ts: t.join()
    print("uid", os.getuid(), flush=True)
    sys.exit(3)
""")


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    require_root()
    raw = str(tmp_path_factory.mktemp("rec") / "w.tlraw")
    cp = timeline_cmd("record", "--raw-only", "-o", raw, "--", sys.executable, "-c", WORKLOAD)
    return cp, read_raw(raw), raw


def _by_kind(proc, kind):
    return proc[proc["kind"] == kind]


def test_launch_exit_code_and_summary(launched):
    cp, log, _ = launched
    assert cp.returncode == 3, cp.stderr
    assert "uid 0" in cp.stdout
    assert "sched_switch" in cp.stderr and "target exited" in cp.stderr
    assert log["finalized"] and log["end"]["exit_code"] == 3
    assert log["header"]["mode"] == "launch" and log["header"]["command"][0] == sys.executable


def test_launch_follows_tree(launched):
    _, log, _ = launched
    proc = log["proc"]
    forks = _by_kind(proc, proc_records.PROC_FORK)
    root = forks[(forks["flags"] & proc_records.PF_LAUNCHED) != 0]
    assert len(root) == 1
    pid = int(root["child_tid"][0])
    assert int(root["tgid"][0]) == log["header"]["recorder_pid"]
    threads = forks[(forks["flags"] & proc_records.PF_THREAD) != 0]
    assert set(threads["child_tgid"]) == {pid} and len(threads) >= 4
    execs = _by_kind(proc, proc_records.PROC_EXEC)
    argvs = {int(r["tid"]): proc_records.argv_of(r) for r in execs}
    assert argvs[pid][:2] == [sys.executable, "-c"]
    child = [t for t, a in argvs.items() if a == ["sleep", "0.05"]]
    assert len(child) == 1
    # the sleep child was forked by the target, not by the recorder
    fork_of_child = forks[forks["child_tid"] == child[0]]
    assert int(fork_of_child["tgid"][0]) == pid
    renames = {events.cstr(r["comm"]) for r in _by_kind(proc, proc_records.PROC_RENAME)}
    assert {"spinner-a", "spinner-b", "spinner-c", "napper"} <= renames
    exits = _by_kind(proc, proc_records.PROC_EXIT)
    main_exit = exits[exits["tid"] == pid]
    assert len(main_exit) == 1 and int(main_exit["exit_code"][0]) == 3 << 8
    # The process ends once: the thread that takes the group's live count to zero carries
    # group_dead.  Usually the main thread, but a joined thread can still be
    # on its way out of the kernel when the main thread exits (CI saw it).
    group = exits[exits["tgid"] == pid]
    dead = group[(group["flags"] & proc_records.PF_GROUP_DEAD) != 0]
    assert len(dead) == 1


def test_launch_sched_states(launched):
    _, log, _ = launched
    sw = log["sched"][log["sched"]["kind"] == sched_records.SCHED_SWITCH]
    tracked_prev = sw[(sw["flags"] & sched_records.SF_PREV_TRACKED) != 0]
    states = set(int(s) for s in tracked_prev["arg"])
    assert 1 in states, states  # S: napper sleeping
    assert 0 in states or any(s >= 0x100 for s in states), states  # preempted while runnable
    wk = log["sched"][log["sched"]["kind"] == sched_records.SCHED_WAKING]
    assert len(wk) > 0
    assert np.all(np.diff(log["sched"]["ts"][:1]) >= 0)
    hdr = log["header"]["clock"]
    assert log["sched"]["ts"].min() >= hdr["boottime_ns"] - 10**9


def test_attach_mode(tmp_path):
    script = textwrap.dedent("""
        import ctypes, threading, time
        def run():
            ctypes.CDLL(None).prctl(15, b"helper", 0, 0, 0)
            while True: time.sleep(0.01)
        threading.Thread(target=run, daemon=True).start()
        print("ready", flush=True)
        while True: time.sleep(0.01)
    """)
    target = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline().strip() == "ready"
        raw = str(tmp_path / "a.tlraw")
        cp = timeline_cmd("record", "--raw-only", "-o", raw, "--pid", str(target.pid), "--duration", "1")
        assert cp.returncode == 0, cp.stderr
        assert target.poll() is None  # recording stopped, target untouched
    finally:
        target.kill()
        target.wait()
    log = read_raw(raw)
    assert log["header"]["mode"] == "attach" and log["end"]["reason"] == "duration reached"
    snap = [m for m in log["metas"] if m.get("type") == "procs"][0]
    (p,) = [p for p in snap["processes"] if p["pid"] == target.pid]
    names = {t["comm"] for t in p["threads"]}
    assert "helper" in names and len(p["threads"]) == 2
    helper_tid = [t["tid"] for t in p["threads"] if t["comm"] == "helper"][0]
    sw = log["sched"]
    assert np.count_nonzero(sw["tid"] == helper_tid) >= 20  # ~100 sleeps/s for 1 s


def test_command_not_found_and_not_executable(tmp_path):
    cp = timeline_cmd("record", "-o", str(tmp_path / "x.pftrace"), "--", "no-such-command-xyz")
    assert cp.returncode == 127
    assert cp.stderr.strip() == "timeline: error: command not found: no-such-command-xyz"
    f = tmp_path / "script.sh"
    f.write_text("#!/bin/sh\necho hi\n")
    cp = timeline_cmd("record", "-o", str(tmp_path / "x.pftrace"), "--", str(f))
    assert cp.returncode == 126 and "not executable" in cp.stderr
    assert not list(tmp_path.glob("x.*"))


def test_unknown_pid_and_bad_output(tmp_path):
    cp = timeline_cmd("record", "--pid", "999999999")
    assert cp.returncode == 2 and cp.stderr.strip() == "timeline: error: no process with PID 999999999"
    marker = tmp_path / "ran"
    cp = timeline_cmd("record", "-o", str(tmp_path / "nodir" / "x.pftrace"), "--", "touch", str(marker))
    assert cp.returncode == 2 and "does not exist" in cp.stderr
    assert not marker.exists()  # failed before the target started
    cp = timeline_cmd("record", "--", )
    assert cp.returncode == 2 and "nothing to record" in cp.stderr


def test_not_root_is_one_clear_line(tmp_path):
    # uid 0 without any capability: what an unprivileged user amounts to.
    cp = subprocess.run(["setpriv", "--bounding-set=-all", "--inh-caps=-all",
                         "--securebits=+noroot,+noroot_locked", sys.executable, "-m", "timeline.cli", "record", "-o", str(tmp_path / "x.pftrace"),
                         "--", "true"], capture_output=True, text=True)
    assert cp.returncode == 2
    assert cp.stderr.strip().splitlines() == [
        "timeline: error: timeline record needs root (CAP_BPF and CAP_PERFMON) to load eBPF programs: run it with sudo; "
        "run `timeline doctor`"]


def test_target_crash_still_finalizes(tmp_path):
    raw = str(tmp_path / "c.tlraw")
    cp = timeline_cmd("record", "--raw-only", "-o", raw, "--", sys.executable, "-c",
                      "import os, signal, time; time.sleep(0.05); os.kill(os.getpid(), signal.SIGKILL)")
    assert cp.returncode == 128 + signal.SIGKILL
    log = read_raw(raw)
    assert log["finalized"] and log["end"]["exit_code"] == 137
    exits = log["proc"][log["proc"]["kind"] == proc_records.PROC_EXIT]
    assert (exits["exit_code"] & 0x7F == signal.SIGKILL).any()


@pytest.mark.parametrize("sig,expect", [(signal.SIGTERM, 5), (signal.SIGINT, 130)])
def test_signal_to_recorder_is_forwarded_and_trace_finalized(tmp_path, sig, expect):
    raw = str(tmp_path / "s.tlraw")
    script = textwrap.dedent("""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(5))
        print("ready", flush=True)
        try:
            time.sleep(30)
        except KeyboardInterrupt:
            sys.exit(130)
    """)
    rec = subprocess.Popen([sys.executable, "-m", "timeline.cli", "record", "--raw-only", "-o", raw, "--",
                            sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)  # no terminal: nothing else gets the signal
    assert rec.stdout.readline().strip() == "ready"
    rec.send_signal(sig)
    out, err = rec.communicate(timeout=30)
    assert rec.returncode == expect, err
    log = read_raw(raw)
    assert log["finalized"] and log["end"]["reason"] == "interrupted"


def test_recorder_killed_leaves_readable_log(tmp_path):
    raw = str(tmp_path / "k.tlraw")
    rec = subprocess.Popen([sys.executable, "-m", "timeline.cli", "record", "--raw-only", "-o", raw, "--",
                            sys.executable, "-c", "import time\nwhile True: time.sleep(0.001)"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while time.time() < deadline and (not os.path.exists(raw) or os.path.getsize(raw) < 20000):
            time.sleep(0.1)
        rec.kill()
        rec.wait()
    finally:
        subprocess.run(["pkill", "-f", "while True: time.sleep\\(0.001\\)"])
    log = read_raw(raw)
    assert not log["finalized"] and log["end"] is None
    assert len(log["sched"]) > 100


def test_runs_as_invoking_user_and_owns_files(udir):
    raw = os.path.join(udir, "u.tlraw")
    env = dict(os.environ, SUDO_UID="65534", SUDO_GID="65534")
    cp = timeline_cmd("record", "--raw-only", "-o", raw, "--", "/bin/sh", "-c",
                      'echo uid $(id -u) $(id -g) $HOME', env=env)
    assert cp.returncode == 0, cp.stderr
    assert "uid 65534 65534 /nonexistent" in cp.stdout
    st = os.stat(raw)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65534, 0o600)
    cp = timeline_cmd("record", "--raw-only", "--as-root", "-o", raw, "--", "/bin/sh", "-c", "echo uid $(id -u)",
                      env=env)
    assert "uid 0" in cp.stdout


def test_drops_are_counted_and_reported(tmp_path):
    # A ping-pong between two threads makes switches faster than a 1 MiB ring
    # drained every 2 s can hold.
    raw = str(tmp_path / "d.tlraw")
    script = textwrap.dedent("""
        import os, threading, time
        r1, w1 = os.pipe(); r2, w2 = os.pipe()
        def pong():
            while os.read(r1, 1) != b"q": os.write(w2, b"x")
        t = threading.Thread(target=pong); t.start()
        end = time.time() + 2.5
        while time.time() < end:
            os.write(w1, b"x"); os.read(r2, 1)
        os.write(w1, b"q"); t.join()
    """)
    cp = timeline_cmd("record", "--raw-only", "--buffer-size", "1", "--flush-interval", "2", "-o", raw, "--",
                      sys.executable, "-c", script)
    assert cp.returncode == 0, cp.stderr
    log = read_raw(raw)
    dropped = sum(log["end"]["drops"]["sched"])
    causes = log["end"]["drop_causes"]["sched"]
    assert dropped > 0 and sum(causes["full"]) == dropped  # a full ring, nothing refused
    assert sum(causes["refused"]) == 0 and causes["ring_bytes"] == 1 << 20
    assert f"{dropped:,} events were dropped (ring buffer full)" in cp.stderr
    assert "try a larger --buffer-size sched=2" in cp.stderr  # the ring that filled, twice its size
    assert "refused" not in cp.stderr


def test_buffer_size_per_family(tmp_path):
    """--buffer-size FAMILY=MiB,... sizes each family's ring; N alone stays the sched ring."""
    raw = str(tmp_path / "b.tlraw")
    cp = timeline_cmd("record", "--raw-only", "-e", "sched,cuda,counters", "--buffer-size", "sched=2,cuda=4,counters=1",
                      "-o", raw, "--", "true")
    assert cp.returncode == 0, cp.stderr
    sizes = {k: c["ring_bytes"] for k, c in read_raw(raw)["end"]["drop_causes"].items()}
    assert sizes == {"proc": 1 << 20, "sched": 2 << 20, "cuda": 4 << 20, "counters": 1 << 20}
    cp = timeline_cmd("record", "--raw-only", "-e", "sched,cuda", "--buffer-size", "8", "-o", raw, "--", "true")
    assert cp.returncode == 0, cp.stderr
    sizes = {k: c["ring_bytes"] for k, c in read_raw(raw)["end"]["drop_causes"].items()}
    assert sizes == {"proc": 1 << 20, "sched": 8 << 20, "cuda": 16 << 20}


@pytest.mark.parametrize("value, says", [
    ("4096", "--buffer-size sched=4096: at most 2048 MiB per ring"),
    ("3", "--buffer-size must be a power of two number of MiB"),
    ("gpu9=2", "--buffer-size gpu9=...: no ring buffer of that name (known: proc, sched,"),
    ("cuda=x", "'cuda=x' is not a number of MiB"),
])
def test_buffer_size_errors_are_one_line(tmp_path, value, says):
    cp = timeline_cmd("record", "--raw-only", "--buffer-size", value, "-o", str(tmp_path / "x.tlraw"), "--", "true")
    assert cp.returncode != 0 and says in cp.stderr, cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1 and "Traceback" not in cp.stderr


def test_same_family_twice_is_recorded_once(tmp_path):
    raw = str(tmp_path / "t.tlraw")
    cp = timeline_cmd("record", "--raw-only", "-e", "sched,sched", "-o", raw, "--", "true")
    assert cp.returncode == 0, cp.stderr
    assert read_raw(raw)["header"]["events"] == ["proc", "sched"]


def test_ctrl_c_in_a_terminal(tmp_path):
    """Ctrl-C typed in a terminal reaches recorder and target once each."""
    import pty

    raw = str(tmp_path / "tty.tlraw")
    count = str(tmp_path / "sigints")
    script = textwrap.dedent(f"""
        import signal, sys, time
        n = 0
        def on_int(*a):
            global n
            n += 1
            open({count!r}, "w").write(str(n))
        signal.signal(signal.SIGINT, on_int)
        print("ready", flush=True)
        while n == 0: time.sleep(0.01)
        time.sleep(0.5)  # a second, forwarded SIGINT would land here
        sys.exit(42)
    """)
    pid, fd = pty.fork()
    if pid == 0:  # child: the pty is our controlling terminal, we lead its foreground group
        os.execv(sys.executable, [sys.executable, "-m", "timeline.cli", "record", "--raw-only", "-o", raw, "--",
                                  sys.executable, "-c", script])
    out = b""
    deadline = time.time() + 30
    while b"ready" not in out and time.time() < deadline:
        out += os.read(fd, 1024)
    os.write(fd, b"\x03")  # what the Ctrl-C key sends
    try:
        while True:
            out += os.read(fd, 1024)
    except OSError:
        pass  # EIO: the other side closed
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 42, out
    assert open(count).read() == "1"  # the target saw exactly one SIGINT
    log = read_raw(raw)
    assert log["finalized"] and log["end"]["exit_code"] == 42
