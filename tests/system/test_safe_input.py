"""timeline.safe_input: the one way root opens a file named by someone else.
Sudo mode is imitated with the user uid 65534 (nobody)."""
from __future__ import annotations

import errno
import os

import pytest

from helpers import NOBODY, require_root

from timeline.safe_input import (BoundedReader, InputTooLarge, NotRegularFile, open_input,
                                 open_inputs, read_fd, read_file)
from timeline.identity import InvokingUser

USER = InvokingUser(NOBODY, NOBODY, [NOBODY], "nobody", "/")


@pytest.fixture
def files(udir):
    secret = os.path.join(udir, "root-only")
    with open(secret, "wb") as f:
        f.write(b"ROOT-ONLY-KEY=1\0")
    os.chmod(secret, 0o600)
    public = os.path.join(udir, "public")
    with open(public, "wb") as f:
        f.write(b"0123456789")
    os.chmod(public, 0o644)
    fifo = os.path.join(udir, "fifo")
    os.mkfifo(fifo)
    link = os.path.join(udir, "link")
    os.symlink(public, link)
    return {"secret": secret, "public": public, "fifo": fifo, "link": link, "dir": udir}


@pytest.mark.parametrize("user", [None, USER], ids=["as-root", "as-user"])
def test_only_regular_files_without_following_links(files, user):
    require_root()
    fd = open_input(files["public"], user)
    try:
        assert read_fd(fd, 4, offset=2) == b"2345"
    finally:
        os.close(fd)
    for name in ("fifo", "link", "dir"):  # a FIFO must be refused at once, never waited on
        with pytest.raises(NotRegularFile):
            os.close(open_input(files[name], user))


def test_user_cannot_read_root_only_file(files):
    require_root()
    with pytest.raises(PermissionError):
        open_input(files["secret"], USER)
    os.close(open_input(files["secret"], None))  # root itself can: the identity is what refuses


def test_batch_open_gives_one_result_per_path(files):
    require_root()
    got = open_inputs([files["public"], files["secret"], files["fifo"], files["public"] + "-missing"], USER)
    assert isinstance(got[0], int) and read_fd(got[0], 3) == b"012"
    os.close(got[0])
    assert isinstance(got[1], PermissionError)
    assert isinstance(got[2], NotRegularFile)
    assert isinstance(got[3], OSError) and got[3].errno == errno.ENOENT


def test_size_bounds(files):
    require_root()
    assert read_file(files["public"], USER, limit=10) == b"0123456789"
    with pytest.raises(InputTooLarge):
        read_file(files["public"], USER, limit=9)
    assert read_file(files["public"], USER, limit=4, whole=False) == b"0123"
    r = BoundedReader(open_input(files["public"]), budget=6, name="public")
    r.seek(5)
    assert r.read(3) == b"567"
    with pytest.raises(InputTooLarge):
        r.read(4)  # 3 + 4 > 6
    r.close()
