"""Opening input files safely next to untrusted code (the read side of security).

In sudo mode `timeline record` runs as root while the target runs as the
invoking user, who controls many names that timeline later reads: paths in
/proc/PID/maps, library paths, raw logs and traces given on the command line,
files next to the output.  The rule (docs/security.md, "Reading files"):

    every file root opens on behalf of the run is either one timeline created
    and still holds open (read through that descriptor, never re-opened by
    name), or is opened here: with the invoking user's identity (a forked
    child, as for output files: safe_output.as_user), with
    O_NOFOLLOW|O_NONBLOCK|O_NOCTTY, checked to be a regular file (fstat)
    before anything is read, and read with a size bound.

So root never reads what the user could not (a root-only file named by a
crafted maps record gives EACCES), a planted symlink is refused, and a FIFO
or device cannot hang or trigger anything (O_NONBLOCK open, then refused).
Without sudo (`user` None, or an identity.InvokingUser that is not in sudo
mode) the same flags and checks apply in-process.

tests/unit/test_open_calls.py fails on any file open in the package that does not
go through this module, safe_output, or a vetted exception listed there.
"""
from __future__ import annotations

import errno
import io
import os
import stat

from .safe_output import _kind, as_user, switches_identity

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

# one SCM_RIGHTS message carries at most 253 descriptors (SCM_MAX_FD)
_FDS_PER_MESSAGE = 200


class NotRegularFile(OSError):
    """The name is a FIFO, device, socket, directory or symbolic link."""


class InputTooLarge(OSError):
    """More bytes than the caller's bound."""


def _not_regular(path, mode: int) -> OSError:
    return NotRegularFile(errno.EINVAL, f"it is {_kind(mode)}, not a regular file", path)


def _open_here(path) -> int:
    """Open with READ_FLAGS and check it is a regular file (runs as the user in sudo mode)."""
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW on a symlink: say what it is
            raise NotRegularFile(errno.ELOOP, "it is a symbolic link (not followed)", e.filename) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _not_regular(path, st.st_mode)
    # O_NONBLOCK means nothing for a regular file, but clear it so a descriptor handed
    # on (to a thread, a subprocess) behaves like an ordinary one
    os.set_blocking(fd, True)
    return fd


def _recheck(fd: int, path) -> int:
    """In the parent: the descriptor the child passed back is a regular file."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _not_regular(path, st.st_mode)
    return fd


def open_input(path, user=None) -> int:
    """A read-only descriptor on regular file `path`, opened as `user` (the
    invoking user in sudo mode; None: as we are) without following a symlink
    at the last component and without blocking.  Raises OSError (including
    NotRegularFile) with errno and a short strerror."""
    path = os.fspath(path)
    if not switches_identity(user):
        return _open_here(path)
    # NotRegularFile crosses the process boundary as a plain OSError: keep its meaning
    try:
        fd = as_user(user, lambda: (None, _open_here(path)))[1]
    except OSError as e:
        if "not a regular file" in (e.strerror or "") or "symbolic link" in (e.strerror or ""):
            raise NotRegularFile(e.errno, e.strerror, e.filename) from None
        raise
    return _recheck(fd, path)


def open_inputs(paths, user=None) -> list:
    """open_input for many paths with one identity switch (one fork in sudo
    mode): a list with, per path, a descriptor or the OSError it gave."""
    paths = [os.fspath(p) for p in paths]
    if not switches_identity(user) or not paths:
        out = []
        for p in paths:
            try:
                out.append(_open_here(p))
            except OSError as e:
                out.append(e)
        return out
    out: list = []
    for i in range(0, len(paths), _FDS_PER_MESSAGE):
        out += _open_batch_as(paths[i:i + _FDS_PER_MESSAGE], user)
    return out


def _open_batch_as(paths: list[str], user) -> list:
    def work():
        errors, fds = {}, []
        for i, p in enumerate(paths):
            try:
                fds.append(_open_here(p))
            except OSError as e:
                errors[i] = [e.errno, e.strerror, e.filename if isinstance(e.filename, str) else None,
                             isinstance(e, NotRegularFile)]
        return {str(k): v for k, v in errors.items()}, fds

    errors, fds = as_user(user, work, many=True)
    it = iter(fds)
    out = []
    for i, p in enumerate(paths):
        err = errors.get(str(i))
        if err is not None:
            cls = NotRegularFile if err[3] else OSError
            out.append(cls(err[0], err[1], err[2] or p))
            continue
        fd = next(it)
        try:
            out.append(_recheck(fd, p))
        except OSError as e:
            out.append(e)
    return out


def read_fd(fd: int, limit: int, offset: int = 0) -> bytes:
    """Up to `limit` bytes from `offset` (pread: the descriptor's position is untouched)."""
    parts, got = [], 0
    while got < limit:
        chunk = os.pread(fd, min(limit - got, 1 << 20), offset + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def read_file(path, user=None, *, limit: int, offset: int = 0, whole: bool = True) -> bytes:
    """The bytes of regular file `path` opened with open_input.  whole=True:
    InputTooLarge when the file holds more than `limit` bytes from `offset`;
    whole=False: the first `limit` bytes from `offset`, whatever the size."""
    fd = open_input(path, user)
    try:
        if whole and os.fstat(fd).st_size - offset > limit:
            raise InputTooLarge(errno.EFBIG, f"larger than {limit} bytes", path)
        data = read_fd(fd, limit + 1 if whole else limit, offset)
        if whole and len(data) > limit:  # grew since fstat
            raise InputTooLarge(errno.EFBIG, f"larger than {limit} bytes", path)
        return data
    finally:
        os.close(fd)


class BoundedReader(io.RawIOBase):
    """A seekable read-only file object over a descriptor that raises
    InputTooLarge once more than `budget` bytes were read in total: for
    parsers that seek around a file we did not write (pyelftools on a mapped
    library), so a crafted file cannot make us read without end."""

    def __init__(self, fd: int, budget: int, name: str = "", closefd: bool = True):
        super().__init__()
        self._fd, self._pos, self.budget, self.name, self._closefd = fd, 0, budget, name, closefd
        self.read_total = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        else:
            pos = os.fstat(self._fd).st_size + offset
        if pos < 0:
            raise ValueError("negative seek position")
        self._pos = pos
        return pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int = -1) -> bytes:
        # checked before RawIOBase.read allocates `size` bytes: a crafted
        # section length must cost neither memory nor time
        if size is None or size < 0:
            size = max(os.fstat(self._fd).st_size - self._pos, 0)
        if self.read_total + size > self.budget:
            raise InputTooLarge(errno.EFBIG, f"read more than {self.budget} bytes", self.name)
        return super().read(size)

    def readinto(self, b) -> int:
        want = len(b)
        if self.read_total + want > self.budget:
            raise InputTooLarge(errno.EFBIG, f"read more than {self.budget} bytes", self.name)
        data = os.pread(self._fd, want, self._pos)
        n = len(data)
        b[:n] = data
        self._pos += n
        self.read_total += n
        return n

    def close(self) -> None:
        if not self.closed and self._closefd and self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        super().close()


def fd_name(fd: int) -> str:
    """A name for a descriptor we hold, for code that insists on a path
    (the kernel resolves it to that open file, not to whatever has the name now)."""
    return f"/proc/self/fd/{fd}"
