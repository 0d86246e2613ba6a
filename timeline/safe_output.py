"""Creating output files safely next to untrusted code.

`timeline record` runs as root while the program it records runs as the
invoking user (sudo) and may be hostile.  Every file timeline writes goes
through `OutputFile`:

- In sudo mode the file-system work (create, lstat, access, rename, unlink)
  is done by a short-lived forked child that has dropped to the invoking
  user's uid, gid and groups, so it can only touch what the user could;
  a created file's descriptor comes back over a socketpair (SCM_RIGHTS).
  (setfsuid would be per-thread and ignore supplementary groups.)
- The file is created under a fresh temporary name in the target directory
  with O_CREAT|O_EXCL|O_NOFOLLOW, written through the descriptor, and
  fchmod/fchown'd on the descriptor: never chmod/chown by path.
- `commit` refuses to replace anything but a regular file the user may
  write (symlink, device, FIFO, directory...), renames the temporary into
  place, then checks that the name refers to our inode; if it was swapped
  in between, that is an error, not a silently lost trace.

Without sudo the same steps run in-process (root still never follows a
symlink nor replaces a device).
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import stat

from .errors import UserError

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a device"),
          (stat.S_ISBLK, "a device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def switches_identity(user) -> bool:
    """Whether work for `user` runs under their identity: the invoking user in
    sudo mode (identity.InvokingUser).  None, or a user whose `sudo` is false:
    we act as ourselves."""
    return user is not None and user.sudo


def as_user(user, fn, many: bool = False):
    """fn() run with `user`'s identity (uid, gid, groups attributes; see
    switches_identity: else as we are).  fn returns (value, fd or None), or
    with many=True (value, [fds]) (at most 253 descriptors); the descriptors
    are passed back to us.  OSErrors raised by fn are raised here with their errno."""
    if not switches_identity(user):
        return fn()
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # one message, whole
    pid = os.fork()
    if pid == 0:  # child: syscalls only, then _exit (never return into the caller's stack)
        code = 1
        try:
            parent.close()
            os.setgroups(list(user.groups))
            os.setgid(user.gid)
            os.setuid(user.uid)
            try:
                value, fd = fn()
                msg = json.dumps(["ok", value]).encode()
            except OSError as e:
                fd, msg = None, json.dumps(["err", e.errno, e.strerror, e.filename]).encode()
            fds = list(fd) if many else ([fd] if fd is not None else [])
            socket.send_fds(child, [msg], fds)
            code = 0
        finally:
            os._exit(code)
    child.close()
    try:
        msg, fds, _, _ = socket.recv_fds(parent, 1 << 20, 253 if many else 1)
    finally:
        parent.close()
        os.waitpid(pid, 0)
    if not msg:
        raise OSError(0, "helper process failed")
    reply = json.loads(msg)
    if reply[0] == "err":
        for fd in fds:
            os.close(fd)
        raise OSError(reply[1], reply[2], reply[3])
    if many:
        return reply[1], list(fds)
    return reply[1], (fds[0] if fds else None)


def _refuse_unless_replaceable(path: str) -> None:
    """Run as the user: an existing `path` must be a regular file we may write."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise OSError(0, f"refusing to replace it: it is {_kind(st.st_mode)}", path)
    if not os.access(path, os.W_OK, follow_symlinks=False):
        raise OSError(0, "permission denied", path)


def check_target(path: str, user=None) -> None:
    """Fail early (UserError) when `path` cannot be created or replaced by `user`."""
    d = os.path.dirname(os.path.abspath(path))

    def probe():
        try:
            if not stat.S_ISDIR(os.stat(d).st_mode):
                raise OSError(0, f"{d} is not a directory", path)
        except FileNotFoundError:
            raise OSError(0, f"directory {d} does not exist", path) from None
        except PermissionError:
            raise OSError(0, f"permission denied on directory {d}", path) from None
        _refuse_unless_replaceable(path)
        if not os.access(d, os.W_OK | os.X_OK):
            raise OSError(0, f"directory {d} is not writable", path)
        return None, None

    try:
        as_user(user, probe)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror}") from None


def remove(path: str, user=None) -> None:
    """Unlink `path` as `user` (a missing file is fine)."""
    def rm():
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return None, None
    as_user(user, rm)


def open_for_reading(path: str, user=None) -> int:
    """A read-only fd on `path` opened as `user` without following a symlink
    at its last component (root must not be pointed at another file)."""
    return as_user(user, lambda: (None, os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)))[1]


class _Pending:
    """What an output being written does at the end of a `with`: commit() when
    the block ended normally, discard() when it raised; `fd` closed either way."""
    fd: int

    def commit(self) -> None:
        raise NotImplementedError

    def discard(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.commit()
            else:
                self.discard()
        finally:
            self.close()
        return False


class OutputFile(_Pending):
    """A file that will appear at `path`: write through `fd`, then `commit()`.

    `user`: the invoking user (identity.InvokingUser), or None: as we are.
    As a context manager: committed on success, discarded on an exception.
    """

    def __init__(self, path: str, user=None, mode: int = 0o600):
        self.path, self.user, self.mode = os.fspath(path), user, mode
        if not self.path:
            raise UserError("cannot write an output with an empty name")
        d, base = os.path.split(os.path.abspath(self.path))
        self.fd, self.tmp = -1, None
        self.tmp, self.fd = as_user(user, lambda: self._create(d, base))
        try:
            os.fchmod(self.fd, mode)
            if switches_identity(user):
                os.fchown(self.fd, user.uid, user.gid)
        except BaseException:
            self.discard()
            raise

    @staticmethod
    def _create(d: str, base: str):
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for _ in range(100):
            tmp = os.path.join(d, f".tl-{base[:40]}-{secrets.token_hex(6)}")
            try:
                return tmp, os.open(tmp, flags, 0o600)
            except FileExistsError:
                continue
        raise OSError(17, "no free temporary name", d)

    def commit(self) -> None:
        """Rename into place (refusing to replace a non-regular file) and check
        that `path` now names our file.  Keeps `fd` open.  Raises UserError."""
        path, tmp = self.path, self.tmp

        def rename():
            _refuse_unless_replaceable(path)
            os.rename(tmp, path)
            return None, None

        try:
            as_user(self.user, rename)
        except OSError as e:
            self.discard()
            raise UserError(f"cannot write {path}: {e.strerror}") from None
        self.tmp = None
        mine = os.fstat(self.fd)
        try:
            now = os.lstat(path)
            swapped = (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino)
        except OSError:
            swapped = True
        if swapped:
            raise UserError(f"{path} was replaced by another file while timeline wrote it; "
                            "its content is not timeline's output")

    def discard(self) -> None:
        """Remove the temporary (if not yet committed); keeps `fd` open."""
        if self.tmp is not None:
            tmp, self.tmp = self.tmp, None
            try:
                remove(tmp, self.user)
            except OSError:
                pass


class OutputDir(_Pending):
    """A directory of output files (a trace set) that will appear at `path`:
    `create(name)` each file, then `commit()`.

    As for OutputFile: made under a fresh temporary name in the target's
    directory (as `user` in sudo mode), its files created inside it through
    its descriptor with O_CREAT|O_EXCL|O_NOFOLLOW, and renamed into place at
    the end.  An existing `path` is replaced only if it is a directory holding
    nothing but the names `replaceable(name)` accepts (a previous trace set);
    anything else there is refused.  As a context manager: committed on
    success, removed on an exception.
    """

    def __init__(self, path: str, user=None, replaceable=None, mode: int = 0o700):
        from .converters.trace_set import CHUNK_RE, INDEX

        self.path, self.user, self.mode = os.fspath(path).rstrip("/"), user, mode
        if not self.path:
            raise UserError("cannot write an output with an empty name")
        self.replaceable = replaceable or (lambda n: n == INDEX or CHUNK_RE.fullmatch(n) is not None)
        self.names: list[str] = []
        d, base = os.path.split(os.path.abspath(self.path))
        self.tmp, self.fd = None, -1
        self.tmp, self.fd = as_user(user, lambda: self._mkdir(d, base))

    @staticmethod
    def _mkdir(d: str, base: str):
        for _ in range(100):
            tmp = os.path.join(d, f".tl-{base[:40]}-{secrets.token_hex(6)}")
            try:
                os.mkdir(tmp, 0o700)
            except FileExistsError:
                continue
            return tmp, os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        raise OSError(17, "no free temporary name", d)

    def create(self, name: str, mode: int = 0o600) -> int:
        """A new file `name` in the directory (a plain name): a descriptor open for writing, the caller's."""
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"not a plain file name: {name!r}")
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        _, fd = as_user(self.user, lambda: (None, os.open(name, flags, mode, dir_fd=self.fd)))
        self.names.append(name)
        return fd

    def commit(self) -> None:
        path, tmp, ok = self.path, self.tmp, self.replaceable

        def rename():
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                st = None
            if st is not None:
                if not stat.S_ISDIR(st.st_mode):
                    raise OSError(0, f"refusing to replace it: it is {_kind(st.st_mode)}", path)
                old = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    names = os.listdir(old)
                    if not all(ok(n) for n in names):
                        raise OSError(0, "refusing to replace a directory that is not a trace set", path)
                    for n in names:
                        os.unlink(n, dir_fd=old)
                finally:
                    os.close(old)
                os.rmdir(path)
            os.rename(tmp, path)
            return None, None

        try:
            os.fchmod(self.fd, self.mode)
            as_user(self.user, rename)
        except OSError as e:
            self.discard()
            raise UserError(f"cannot write {path}: {e.strerror}") from None
        self.tmp = None
        mine = os.fstat(self.fd)
        try:
            now = os.lstat(path)
            swapped = (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino)
        except OSError:
            swapped = True
        if swapped:
            raise UserError(f"{path} was replaced by another directory while timeline wrote it; "
                            "its content is not timeline's output")

    def discard(self) -> None:
        """Remove the temporary directory and the files made in it."""
        if self.tmp is None:
            return
        tmp, self.tmp, dfd, names = self.tmp, None, self.fd, list(self.names)

        def rm():
            for n in names:
                try:
                    os.unlink(n, dir_fd=dfd)
                except FileNotFoundError:
                    pass
            os.rmdir(tmp)
            return None, None
        try:
            as_user(self.user, rm)
        except OSError:
            pass
