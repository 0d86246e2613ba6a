"""Whom timeline acts for: the invoking user.

`sudo timeline ...` runs as root on behalf of the user behind sudo: that user
creates and owns every output, every file named by them or by what they run
is opened with their identity, and a launched command runs as them (unless
--as-root).  safe_output and safe_input do that file work in a child that has
dropped to their uid, gid and groups.  Without sudo we act as ourselves and
the same helpers run in-process.

A command makes one InvokingUser (invoking_user()) and hands it on as one
value; `sudo` says which of the two cases it is.  The low-level helpers
(safe_output, safe_input) also take None, meaning "as we are".
"""
from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from typing import Sequence

from . import safe_input, safe_output
from .errors import UserError


@dataclass(frozen=True)
class InvokingUser:
    uid: int
    gid: int
    groups: Sequence[int]
    name: str
    home: str
    sudo: bool = True  # False: not sudo mode; the ids are our own and nothing switches identity

    @classmethod
    def ourselves(cls) -> InvokingUser:
        """Our own identity: files are handled, and a command runs, as we are."""
        uid, gid = os.geteuid(), os.getegid()
        name, home = _account(uid)
        return cls(uid, gid, tuple(os.getgroups()), name, home, sudo=False)

    # -- files, as this user ---------------------------------------------------
    def open_input(self, path) -> int:
        """A descriptor on regular file `path`, opened as this user (safe_input.open_input)."""
        return safe_input.open_input(path, self)

    def read_file(self, path, *, limit: int, offset: int = 0, whole: bool = True) -> bytes:
        """The bytes of regular file `path`, opened as this user and bounded (safe_input.read_file)."""
        return safe_input.read_file(path, self, limit=limit, offset=offset, whole=whole)

    def check_writable(self, path: str) -> None:
        """Fail before any work (UserError) when this user cannot create or replace `path`."""
        if not path:
            raise UserError("the output name is empty")
        safe_output.check_target(path, self)

    def remove(self, path: str) -> None:
        """Unlink `path` as this user (a missing file is fine)."""
        safe_output.remove(path, self)


def _account(uid: int) -> tuple[str, str]:
    """(login name, home) of uid; a uid with no passwd entry: its number and /."""
    try:
        pw = pwd.getpwuid(uid)
        return pw.pw_name, pw.pw_dir
    except KeyError:
        return str(uid), "/"


def invoking_user() -> InvokingUser:
    """The user behind sudo when we are root through sudo (sudo mode), else ourselves."""
    if os.geteuid() != 0 or "SUDO_UID" not in os.environ:
        return InvokingUser.ourselves()
    try:
        uid = int(os.environ["SUDO_UID"])
        gid = int(os.environ.get("SUDO_GID", uid))
    except ValueError:
        return InvokingUser.ourselves()
    if uid == 0:
        return InvokingUser.ourselves()
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:  # a uid with no passwd entry: no supplementary groups
        return InvokingUser(uid, gid, (gid,), str(uid), "/")
    return InvokingUser(uid, gid, tuple(os.getgrouplist(pw.pw_name, gid)), pw.pw_name, pw.pw_dir)
