"""The process being recorded: launching a command, or finding a running tree."""
from __future__ import annotations

import os
import shutil
import subprocess

import psutil

from .errors import UserError
from .identity import InvokingUser


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


def launch(argv: list[str], user: InvokingUser, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start the target as `user` (in sudo mode the user behind sudo, with
    their HOME and name; else as we are); it stays in our process group so
    Ctrl-C reaches it.  extra_env: variables the families add (e.g. the gpu
    family's injection)."""
    env = dict(os.environ)
    env.update(extra_env or {})
    kwargs = {}
    if user.sudo:
        env.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
        for k in ("SUDO_COMMAND", "SUDO_USER", "SUDO_UID", "SUDO_GID"):
            env.pop(k, None)
        kwargs.update(user=user.uid, group=user.gid, extra_groups=list(user.groups))
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
