"""Output-path helpers shared by `record` and `convert`."""
from __future__ import annotations

import os

from ..errors import UserError

SUFFIXES = {"perfetto": ".pftrace", "chrome": ".json"}


def infer_format(path: str, fmt: str | None) -> str:
    if fmt:
        return fmt
    return "chrome" if path.endswith((".json", ".json.gz")) else "perfetto"


def raw_path_for(output: str) -> str:
    for suf in (".pftrace", ".perfetto-trace", ".json.gz", ".json"):
        if output.endswith(suf):
            return output[: -len(suf)] + ".tlraw"
    return output + ".tlraw"


def check_writable(path: str) -> None:
    """Fail before any work if `path` cannot be created or replaced."""
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise UserError(f"cannot write {path}: directory {d} does not exist")
    if os.path.isdir(path):
        raise UserError(f"cannot write {path}: it is a directory")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UserError(f"cannot write {path}: permission denied")
    if not os.access(d, os.W_OK | os.X_OK):
        raise UserError(f"cannot write {path}: directory {d} is not writable")


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
