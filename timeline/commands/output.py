"""Output-path helpers shared by `record` and `convert`."""
from __future__ import annotations


from ..errors import UserError
from ..safe_output import check_target

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


def check_writable(path: str, user=None) -> None:
    """Fail before any work if `path` cannot be created or replaced (by `user`,
    the invoking user in sudo mode): see safe_output.check_target."""
    if not path:
        raise UserError("the output name is empty")
    check_target(path, user)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
