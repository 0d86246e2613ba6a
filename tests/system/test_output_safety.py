"""Output files next to untrusted code (issue 16): sudo is imitated as root with
SUDO_UID/SUDO_GID=65534; the "user" is uid 65534 (nobody)."""
from __future__ import annotations

import os
import stat
import subprocess
import textwrap
import time

import pytest

from helpers import NOBODY, SUDO_NOBODY, require_root, timeline_cmd
from rawlog_factory import scenario

from timeline.errors import UserError
from timeline.identity import InvokingUser

# The attacker runs as the user, who cannot reach a Python under /root (pyenv).
USER_PYTHON = "/usr/bin/python3"
NOBODY_USER = InvokingUser(NOBODY, NOBODY, [NOBODY], "nobody", "/")
SECRET = b"root-owned content\n"


@pytest.fixture
def victim(tmp_path):
    """A root-owned 0644 file that no output may ever touch."""
    p = tmp_path / "victim"
    p.write_bytes(SECRET)
    os.chmod(p, 0o644)
    return str(p)


def assert_untouched(victim):
    st = os.lstat(victim)
    assert stat.S_ISREG(st.st_mode) and (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o644)
    with open(victim, "rb") as f:
        assert f.read() == SECRET


def assert_one_line_error(cp, *words):
    assert cp.returncode != 0
    err = cp.stderr.strip()
    assert err.startswith("timeline: error: ") and "\n" not in err, cp.stderr
    for w in words:
        assert w in err, err


def plant(link, target):
    """A symlink owned by the user, as the user would plant it."""
    os.symlink(target, link)
    os.lchown(link, NOBODY, NOBODY)


def sudo_env():
    return dict(os.environ, **SUDO_NOBODY)


def test_planted_symlink_at_raw_log_is_not_followed(udir, victim):
    require_root()
    plant(os.path.join(udir, "out.tlraw"), victim)
    cp = timeline_cmd("record", "-q", "-o", os.path.join(udir, "out.pftrace"), "--", "/bin/true", env=sudo_env())
    assert_one_line_error(cp, "symbolic link")
    assert_untouched(victim)


def test_planted_symlink_at_trace_is_not_followed(udir, victim):
    require_root()
    plant(os.path.join(udir, "evil.pftrace"), victim)
    plant(os.path.join(udir, "evil2.pftrace"), os.path.join(udir, "evil2.tlraw"))
    for name in ("evil.pftrace", "evil2.pftrace"):
        cp = timeline_cmd("record", "-q", "-o", os.path.join(udir, name), "--", "/bin/true", env=sudo_env())
        assert_one_line_error(cp, "symbolic link")
    assert_untouched(victim)


def test_root_without_sudo_does_not_follow_symlinks(tmp_path, victim):
    raw = scenario(str(tmp_path / "r.tlraw"))
    plant(str(tmp_path / "o.pftrace"), victim)
    cp = timeline_cmd("convert", "-q", raw, "-o", str(tmp_path / "o.pftrace"))
    assert_one_line_error(cp, "symbolic link")
    assert_untouched(victim)


@pytest.fixture
def specials(tmp_path):
    """A character device (a copy of /dev/null's numbers) and a FIFO."""
    dev, fifo = str(tmp_path / "null"), str(tmp_path / "fifo")
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mkfifo(fifo, 0o666)
    return {dev: stat.S_ISCHR, fifo: stat.S_ISFIFO}


def test_devices_and_fifos_are_not_replaced(tmp_path, specials):
    require_root()
    raw = scenario(str(tmp_path / "r.tlraw"))
    trace = str(tmp_path / "r.pftrace")
    assert timeline_cmd("convert", "-q", raw, "-o", trace).returncode == 0
    for path, is_kind in specials.items():
        kind = "a device" if is_kind is stat.S_ISCHR else "a FIFO"
        for args in (("record", "-q", "-o", path, "--", "/bin/true"),
                     ("record", "-q", "--raw-only", "-o", path, "--", "/bin/true"),
                     ("convert", "-q", raw, "-o", path),
                     ("check", trace, "--annotate", path)):
            cp = timeline_cmd(*args)
            assert_one_line_error(cp, kind)
            assert is_kind(os.lstat(path).st_mode), args


def test_sudo_user_cannot_write_into_root_only_directory(tmp_path, udir):
    raw = scenario(os.path.join(udir, "r.tlraw"))
    secret_dir = tmp_path / "root-only"
    secret_dir.mkdir(mode=0o700)
    target = secret_dir / "t.pftrace"
    target.write_bytes(SECRET)
    os.chmod(tmp_path, 0o755)  # the user may reach secret_dir's parent, not write into secret_dir
    cp = timeline_cmd("convert", "-q", raw, "-o", str(target), env=sudo_env())
    assert_one_line_error(cp, "permission denied")
    st = os.lstat(target)
    assert st.st_uid == 0 and target.read_bytes() == SECRET
    # A file the user may not write, in a directory the user may write: not replaced either.
    theirs = os.path.join(udir, "roots.pftrace")
    with open(theirs, "wb") as f:
        f.write(SECRET)
    cp = timeline_cmd("convert", "-q", raw, "-o", theirs, env=sudo_env())
    assert_one_line_error(cp, "permission denied")
    assert os.lstat(theirs).st_uid == 0


ATTACKER = textwrap.dedent("""
    import os, sys, time
    d, victim, stop = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
    suffixes = tuple(sys.argv[4].split(","))
    n = 0
    while time.monotonic() < stop:
        for name in os.listdir(d):
            if name.startswith(".tl-") or name.endswith(suffixes):
                tmp = os.path.join(d, ".evil%d" % n)
                n += 1
                try:
                    os.symlink(victim, tmp)
                    os.rename(tmp, os.path.join(d, name))
                except OSError:
                    pass
""")


def _attacker(d, victim, seconds):
    return subprocess.Popen([USER_PYTHON, "-c", ATTACKER, d, victim, str(seconds), ".pftrace,.tlraw"],
                            user=NOBODY, group=NOBODY, extra_groups=[])


def test_race_swapping_names_for_symlinks_takes_nothing_over(tmp_path, udir, victim):
    """100 conversions as the user while a process running as the user keeps
    replacing the temporaries and the output name with symlinks to a root file."""
    from timeline.commands.convert import run_conversion

    raw = scenario(str(tmp_path / "r.tlraw"))
    out = os.path.join(udir, "out.pftrace")
    attacker = _attacker(udir, victim, 120)
    ok = refused = 0
    bait = os.path.join(udir, ".tl-bait")
    os.close(os.open(bait, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    while not os.path.islink(bait) and attacker.poll() is None:  # wait until it swaps names
        time.sleep(0.01)
    assert attacker.poll() is None, "attacker did not start"
    try:
        for _ in range(100):
            try:
                run_conversion(raw, out, "perfetto", user=NOBODY_USER, quiet=True)
                ok += 1
            except UserError as e:
                assert "\n" not in str(e)
                refused += 1
            assert_untouched(victim)
    finally:
        attacker.kill()
        attacker.wait()
    assert ok + refused == 100
    assert refused > 0, "the attacker never got in: the test does not exercise the race"
    assert_untouched(victim)


HOSTILE_TARGET = textwrap.dedent("""
    import os, sys, time
    # Double fork: the helper outlives the target, as a real attack would.
    if os.fork() != 0:
        while not os.path.exists(sys.argv[4]):  # exit once the helper runs
            time.sleep(0.01)
        time.sleep(0.3)
    else:
        os.setsid()
        if os.fork() == 0:
            with open(sys.argv[4], "w") as f:
                f.write(str(os.getpid()))
            os.execv(sys.executable, [sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3], "20",
                                      ".pftrace"])
        os._exit(0)
""")


def test_record_with_double_forking_hostile_target(udir, victim):
    require_root()
    pidfile = os.path.join(udir, "helper.pid")
    out = os.path.join(udir, "out.pftrace")
    cp = timeline_cmd("record", "-q", "-o", out, "--", USER_PYTHON, "-c", HOSTILE_TARGET, ATTACKER, udir,
                      victim, pidfile, env=sudo_env())
    try:
        assert os.path.exists(pidfile), f"the hostile target did not run: {cp.stderr}"
        assert_untouched(victim)
        if cp.returncode == 0:  # the attack missed every window: the output must be ours
            st = os.lstat(out)
            assert stat.S_ISREG(st.st_mode) and st.st_uid == NOBODY
        else:
            assert_one_line_error(cp)
    finally:
        deadline = time.monotonic() + 5
        while not os.path.exists(pidfile) and time.monotonic() < deadline:
            time.sleep(0.05)
        if os.path.exists(pidfile):
            try:
                os.kill(int(open(pidfile).read()), 9)
            except (OSError, ValueError):
                pass
    assert_untouched(victim)


def test_sudo_conversion_does_not_read_through_a_planted_raw_log_symlink(tmp_path, udir):
    """A .tlraw swapped for a symlink to a root-only raw log: root must not
    convert that log into the user's trace."""
    from timeline.commands.convert import run_conversion

    secret_raw = scenario(str(tmp_path / "secret.tlraw"))
    os.chmod(secret_raw, 0o600)
    plant(os.path.join(udir, "r.tlraw"), secret_raw)
    with pytest.raises(UserError, match="cannot read"):
        run_conversion(os.path.join(udir, "r.tlraw"), os.path.join(udir, "r.pftrace"), "perfetto",
                       user=NOBODY_USER, quiet=True)
    assert not os.path.exists(os.path.join(udir, "r.pftrace"))
    # The user's own raw log converts, and the trace is theirs.
    os.unlink(os.path.join(udir, "r.tlraw"))
    mine = scenario(os.path.join(udir, "r.tlraw"))
    os.chown(mine, NOBODY, NOBODY)
    run_conversion(mine, os.path.join(udir, "r.pftrace"), "perfetto", user=NOBODY_USER, quiet=True)
    st = os.lstat(os.path.join(udir, "r.pftrace"))
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o600)
