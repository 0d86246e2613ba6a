"""Output-path helpers shared by `record` and `convert`."""
from __future__ import annotations


from ..errors import UserError
from ..trace_file import format_for

SUFFIXES = {"perfetto": ".pftrace", "chrome": ".json"}


def infer_format(path: str, fmt: str | None) -> str:
    """fmt when given, else the format the output name implies (trace_file.format_for)."""
    return fmt or format_for(path)


def raw_path_for(output: str) -> str:
    for suf in (".pftrace", ".perfetto-trace", ".json.gz", ".json"):
        if output.endswith(suf):
            return output[: -len(suf)] + ".tlraw"
    return output + ".tlraw"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def expand_template(template: str, *, host: str, pid: int, env, when: float, dump: int | None = None) -> str:
    """`-o` templates, so one command line serves every node and rank:
    %h host name, %p the recorder's pid (known before the target starts, when
    the name must already be checked), %r the rank from the recorder's own
    environment (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID: set when a
    launcher starts one recorder per rank), %t start time (YYYYmmdd-HHMMSS),
    %% a literal %.  Anything else after % is an error."""
    if "%" not in template:
        return template
    import re
    import time

    from ..ranks import RANK_VARS

    def rank() -> str:
        for name in RANK_VARS["rank"]:
            v = env.get(name.decode())
            if v is not None and v.isascii() and v.isdigit() and len(v) <= 9:
                return str(int(v))
        raise UserError("-o uses %r but none of RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID is set")

    def sub(m) -> str:
        c = m.group(1)
        if c == "%":
            return "%"
        if c == "h":
            return re.sub(r"[^A-Za-z0-9._-]", "_", host) or "host"
        if c == "p":
            return str(pid)
        if c == "r":
            return rank()
        if c == "n" and dump is not None:  # --ring dumps; the caller says which
            return str(dump)
        if c == "t":
            return time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
        shown = c if c.isprintable() and c else repr(c)
        raise UserError(f"-o: unknown template %{shown} (known: %h host, %p pid, %r rank, %t time, %n dump number with --ring, %% a %)")
    return re.sub(r"%(.?)", sub, template, flags=re.S)
