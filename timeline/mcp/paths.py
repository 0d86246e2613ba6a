"""The directories `timeline mcp --allow DIR` lets an agent read, and the
traces in them.

A path an agent names is resolved (symbolic links followed, `..` removed)
before it is compared, so a link inside an allowed directory that points
outside it is refused like the outside path itself; what is opened is the
resolved path, through trace_file (as the invoking user, no link at the last
component, regular files only)."""
from __future__ import annotations

import os
import time

from .. import safe_input, trace_file
from ..errors import UserError
from ..terminal import printable

TRACE_SUFFIXES = trace_file.PERFETTO_SUFFIXES + trace_file.CHROME_SUFFIXES + (".pftrace.gz", ".tlraw")
MAX_LISTED = 500          # traces one list_traces answer holds
MAX_WALKED = 20_000       # directory entries one listing looks at


class PathRefused(UserError):
    """A path outside the allowed directories (one line)."""


class AllowedDirs:
    def __init__(self, dirs):
        roots = []
        for d in dirs:
            real = os.path.realpath(d)
            if not os.path.isdir(real):
                raise UserError(f"--allow {printable(d)}: not a directory")
            roots.append(real)
        self.roots = list(dict.fromkeys(roots))

    def __str__(self) -> str:
        return ", ".join(self.roots)

    def inside(self, real: str) -> bool:
        return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in self.roots)

    def resolve(self, path: str) -> str:
        """The real path of `path` (a relative one is taken from the first
        allowed directory) when it lies inside an allowed directory, else PathRefused."""
        if not isinstance(path, str) or not path or "\0" in path:
            raise PathRefused("give a path to a trace (an empty name or one holding NUL is none)")
        full = path if os.path.isabs(path) else os.path.join(self.roots[0], path)
        real = os.path.realpath(full)
        if self.inside(real):
            return real
        if self.inside(os.path.normpath(full)):
            raise PathRefused(f"{printable(path)} leads outside the allowed directories through a symbolic link "
                              f"(allowed: {self})")
        raise PathRefused(f"{printable(path)} is outside the allowed directories ({self}); "
                          "start `timeline mcp --allow DIR` with the directory that holds it")


def find_traces(allowed: AllowedDirs, directory: str | None = None, user=None) -> dict:
    """The trace files (by name: .pftrace, .json, .json.gz, .tlraw ...) under
    `directory` (else every allowed directory), newest first, with their size,
    time and kind (from their first bytes).  Links are not followed."""
    tops = [allowed.resolve(directory)] if directory else allowed.roots
    found, cut = _walk(tops)
    rows = []
    # opened as the invoking user (sudo mode): what they cannot read is left out; a link is refused here
    fds = safe_input.open_inputs(found, user)
    for path, fd in zip(found, fds):
        if isinstance(fd, OSError):
            continue
        try:
            st = os.fstat(fd)
            rows.append({"path": path, "bytes": st.st_size, "mtime": st.st_mtime,
                         "modified": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.st_mtime)),
                         "kind": _kind(trace_file.read_head(fd))})
        finally:
            os.close(fd)
    rows.sort(key=lambda r: (-r["mtime"], r["path"]))
    for r in rows:
        del r["mtime"]
    return {"allowed": allowed.roots, "traces": rows[:MAX_LISTED], "count": len(rows),
            "truncated": cut or len(rows) > MAX_LISTED}


def _walk(tops: list[str]) -> tuple[list[str], bool]:
    """(the trace names under `tops`, whether the walk stopped early)."""
    found, walked = [], 0
    for top in tops:
        for d, subdirs, files in os.walk(top):  # followlinks=False: a linked directory is not entered
            subdirs.sort()
            walked += len(subdirs) + len(files)
            found += [os.path.join(d, f) for f in sorted(files) if f.lower().endswith(TRACE_SUFFIXES)]
            if walked > MAX_WALKED or len(found) > MAX_LISTED * 4:
                return found, True
    return found, False


def _kind(head: bytes) -> str:
    kind = trace_file.sniff(head)
    if kind == trace_file.GZIP:
        inner = trace_file.sniff(trace_file.gzip_head(head))
        return {trace_file.JSON: "chrome json (gzip)", trace_file.PROTO: "perfetto (gzip)"}.get(inner, "gzip")
    return {trace_file.RAW: "raw log (convert it first: timeline convert)", trace_file.JSON: "chrome json",
            trace_file.PROTO: "perfetto", None: "unknown"}[kind] if head else "empty"
