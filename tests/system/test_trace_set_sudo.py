"""`timeline convert --split` in sudo mode (imitated: root with SUDO_UID/SUDO_GID=65534, see
test_output_safety.py): the trace set is made as the user, and nothing planted at its name is
followed or replaced (docs/security.md, safe_output.OutputDir)."""
from __future__ import annotations

import os
import stat

from helpers import NOBODY, require_root, timeline_cmd
from rawlog_factory import many_switches
import test_output_safety
from test_output_safety import assert_one_line_error, assert_untouched, plant, sudo_env

victim = test_output_safety.victim  # a fixture
SPLIT = ("--split", "1000ev")  # 5000 switches in 5 chunks


def _raw(udir) -> str:
    raw = many_switches(os.path.join(udir, "r.tlraw"), 5000, block=250)
    os.chown(raw, NOBODY, NOBODY)
    return raw


def test_set_and_chunks_belong_to_the_user(udir):
    require_root()
    raw = _raw(udir)
    cp = timeline_cmd("convert", "-q", raw, "-o", os.path.join(udir, "r.pftrace"), *SPLIT, env=sudo_env())
    assert cp.returncode == 0, cp.stderr
    d = os.path.join(udir, "r.tlset")
    st = os.lstat(d)
    assert stat.S_ISDIR(st.st_mode) and (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o700)
    names = sorted(os.listdir(d))
    assert names[-1] == "index.json" and len(names) == 6
    for n in names:
        st = os.lstat(os.path.join(d, n))
        assert stat.S_ISREG(st.st_mode) and (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, 0o600), n
    assert [n for n in os.listdir(udir) if n.startswith(".tl-")] == []  # no temporary left
    # converting again replaces the previous set (only index.json and chunks in it)
    cp = timeline_cmd("convert", "-q", raw, "-o", os.path.join(udir, "r.pftrace"), "--split", "2500ev",
                      env=sudo_env())
    assert cp.returncode == 0, cp.stderr
    assert len(os.listdir(d)) == 3 and os.lstat(d).st_uid == NOBODY


def test_a_symlink_at_the_set_name_is_not_followed(udir, tmp_path, victim):
    require_root()
    raw = _raw(udir)
    elsewhere = tmp_path / "root-dir"  # a root-owned directory the user cannot write
    elsewhere.mkdir()
    (elsewhere / "index.json").write_bytes(b"{}")
    for target in (str(elsewhere), victim):
        plant(os.path.join(udir, "r.tlset"), target)
        cp = timeline_cmd("convert", "-q", raw, "-o", os.path.join(udir, "r.pftrace"), *SPLIT, env=sudo_env())
        assert_one_line_error(cp, "symbolic link")
        os.unlink(os.path.join(udir, "r.tlset"))
    assert sorted(os.listdir(elsewhere)) == ["index.json"] and (elsewhere / "index.json").read_bytes() == b"{}"
    assert_untouched(victim)
    assert [n for n in os.listdir(udir) if n.startswith(".tl-")] == []


def test_a_symlink_inside_an_old_set_is_not_followed(udir, victim):
    require_root()
    raw = _raw(udir)
    d = os.path.join(udir, "r.tlset")
    os.mkdir(d)
    os.chown(d, NOBODY, NOBODY)
    plant(os.path.join(d, "chunk-0001.pftrace"), victim)  # a name the set would replace
    cp = timeline_cmd("convert", "-q", raw, "-o", os.path.join(udir, "r.pftrace"), *SPLIT, env=sudo_env())
    # the old set is replaced: the link itself unlinked, never followed
    assert cp.returncode == 0, cp.stderr
    assert_untouched(victim)
    assert not os.path.islink(os.path.join(d, "chunk-0001.pftrace"))
    assert os.lstat(os.path.join(d, "chunk-0001.pftrace")).st_uid == NOBODY


def test_an_existing_directory_that_is_not_a_set_is_refused(udir):
    require_root()
    raw = _raw(udir)
    d = os.path.join(udir, "r.tlset")
    os.mkdir(d)
    os.chown(d, NOBODY, NOBODY)
    with open(os.path.join(d, "notes.txt"), "w") as f:
        f.write("mine")
    cp = timeline_cmd("convert", "-q", raw, "-o", os.path.join(udir, "r.pftrace"), *SPLIT, env=sudo_env())
    assert_one_line_error(cp, "not a trace set")
    assert os.listdir(d) == ["notes.txt"]
    assert [n for n in os.listdir(udir) if n.startswith(".tl-")] == []


def test_a_directory_the_user_cannot_write_is_refused(udir, tmp_path):
    """Root could write there; the user cannot, so neither does timeline on the user's behalf."""
    require_root()
    raw = _raw(udir)
    out = tmp_path / "root-only"
    out.mkdir()
    os.chmod(out, 0o755)
    cp = timeline_cmd("convert", "-q", raw, "-o", str(out / "r.pftrace"), *SPLIT, env=sudo_env())
    assert_one_line_error(cp)
    assert os.listdir(out) == []
