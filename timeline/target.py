"""The process being recorded: launching a command, or finding a running tree."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass

import psutil

from .errors import UserError


@dataclass
class RunAs:
    uid: int
    gid: int
    groups: list[int]
    user: str
    home: str


def invoking_user() -> RunAs | None:
    """The user behind sudo, when we are root through sudo; else None."""
    if os.geteuid() != 0 or "SUDO_UID" not in os.environ:
        return None
    try:
        uid = int(os.environ["SUDO_UID"])
        gid = int(os.environ.get("SUDO_GID", uid))
    except ValueError:
        return None
    if uid == 0:
        return None
    try:
        pw = pwd.getpwuid(uid)
        return RunAs(uid, gid, os.getgrouplist(pw.pw_name, gid), pw.pw_name, pw.pw_dir)
    except KeyError:  # uid with no passwd entry: no supplementary groups
        return RunAs(uid, gid, [gid], str(uid), "/")


def resolve_command(argv: list[str], env: dict[str, str]) -> str:
    """Path of argv[0] as a shell would find it; UserError 127/126 like a shell."""
    name = argv[0]
    if "/" in name:
        path = name
        if not os.path.exists(path):
            raise UserError(f"command not found: {name}", 127)
    else:
        path = shutil.which(name, path=env.get("PATH", os.defpath))
        if path is None:
            raise UserError(f"command not found: {name}", 127)
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise UserError(f"command is not executable: {name}", 126)
    return path


def launch(argv: list[str], run_as: RunAs | None, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start the target; it stays in our process group so Ctrl-C reaches it.
    extra_env: variables the families add (e.g. the gpu family's injection)."""
    env = dict(os.environ)
    env.update(extra_env or {})
    kwargs = {}
    if run_as is not None:
        env.update(HOME=run_as.home, USER=run_as.user, LOGNAME=run_as.user)
        for k in ("SUDO_COMMAND", "SUDO_USER", "SUDO_UID", "SUDO_GID"):
            env.pop(k, None)
        kwargs.update(user=run_as.uid, group=run_as.gid, extra_groups=run_as.groups)
    path = resolve_command(argv, env)
    try:
        return subprocess.Popen([path, *argv[1:]], env=env, close_fds=True, **kwargs)
    except PermissionError:
        raise UserError(f"command is not executable: {argv[0]}", 126) from None
    except OSError as e:
        raise UserError(f"cannot run {argv[0]}: {e.strerror}", 126) from None


def exit_status(returncode: int) -> int:
    """Popen return code as a shell reports it (128+N for signal N)."""
    return 128 - returncode if returncode < 0 else returncode


def _comm(pid: int, tid: int) -> str:
    try:
        with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8", errors="surrogateescape") as f:
            return f.read().rstrip("\n")
    except OSError:
        return ""


def snapshot_tree(pid: int) -> list[dict]:
    """The process `pid`, its descendants, and all their threads."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        raise UserError(f"no process with PID {pid}") from None
    out = []
    for p in procs:
        try:
            with p.oneshot():
                info = {"pid": p.pid, "ppid": p.ppid(), "comm": _comm(p.pid, p.pid), "cmdline": p.cmdline(),
                        "threads": [{"tid": t.id, "comm": _comm(p.pid, t.id)} for t in p.threads()]}
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue  # exited while we looked
        except psutil.AccessDenied:
            info = {"pid": p.pid, "ppid": 0, "comm": "", "cmdline": [], "threads": [{"tid": p.pid, "comm": ""}]}
        out.append(info)
    return out
