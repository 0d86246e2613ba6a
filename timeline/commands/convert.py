"""`timeline convert RAW -o OUT`: turn a raw log into a trace file."""
from __future__ import annotations

import errno
import os
import sys

import click

from ..errors import UserError
from ..rawlog import RawLogError
from ..identity import invoking_user
from ..safe_input import fd_name, open_input
from .output import human_bytes, infer_format


EXIT_NO_TRACE = 74  # EX_IOERR: no room to write the trace; the raw log is kept


class NoRoom(UserError):
    """The trace could not be written for lack of space; nothing was left at its name."""

    def __init__(self, msg: str):
        super().__init__(msg, EXIT_NO_TRACE)


class SplitOption(click.ParamType):
    """--split: DURATION (5m), EVENTS per chunk (2000000ev, 2Mev), auto or off."""
    name = "split"

    def convert(self, value, param, ctx):
        from ..converters.trace_set import SplitSpec, parse_split

        if value is None or isinstance(value, SplitSpec):
            return value
        try:
            return parse_split(value) or OFF
        except ValueError as e:
            self.fail(str(e), param, ctx)


OFF = "off"  # --split off: never a trace set


def split_option(fn):
    from ..converters.trace_set import AUTO_CHUNK_EVENTS, AUTO_SPLIT_ABOVE

    return click.option(
        "--split", type=SplitOption(), default="auto", show_default=True, metavar="DURATION|EVENTS|auto|off",
        help=f"Write a trace set (NAME.tlset/: numbered Perfetto traces + index.json) split every DURATION "
             f"(5m, 90s) or EVENTS (2000000ev, 2Mev); auto: only above {AUTO_SPLIT_ABOVE // 1_000_000} M events, "
             f"in chunks of {AUTO_CHUNK_EVENTS // 1_000_000} M (docs/trace-sets.md).")(fn)


def split_spec(split):
    """The converter's split argument for an option value (None: one trace)."""
    return None if split in (None, OFF) else split


def run_conversion(raw: str, out: str, fmt: str, user=None, quiet: bool = False, raw_fd: int | None = None,
                   split=None):
    """Convert with a progress bar on a terminal; warn about damage.
    user: the invoking user (identity.InvokingUser), who creates and owns `out`.
    raw_fd: a descriptor on the raw log timeline wrote itself (record), read
    through it, never re-opened by name; without one, `raw` is opened as
    `user` (safe_input: no symlink, regular files only).  `raw` names it in
    messages either way."""
    from ..converters import convert

    progress = None
    bar = None
    own_fd = raw_fd is None
    try:
        if own_fd:
            raw_fd = open_input(raw, user)
    except OSError as e:
        raise UserError(f"cannot read {raw}: {e.strerror}") from None
    src = fd_name(raw_fd)
    try:
        if not quiet and sys.stderr.isatty():
            from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

            bar = Progress("converting", BarColumn(), DownloadColumn(), TimeRemainingColumn(), transient=True,
                           console=_console())
            task = bar.add_task("convert", total=os.fstat(raw_fd).st_size)
            bar.start()
            progress = lambda done, total: bar.update(task, completed=done, total=total)  # noqa: E731
        from ..capture_cut import prepare

        cut, note = prepare(raw_fd, raw, os.path.dirname(os.path.abspath(raw)), user)
        if note and not quiet:
            click.echo(f"timeline: {note}", err=True)
        try:
            # the converter insists on a path: the descriptor's own, which the kernel
            # resolves to the file we hold whatever has the name now
            res = convert(src if cut is None else fd_name(cut.fd), out, fmt=fmt, progress=progress, user=user,
                          split=split_spec(split), source=os.path.basename(raw))
        finally:
            if cut is not None:
                cut.discard()
    except (RawLogError, ValueError) as e:
        raise UserError(str(e).replace(src, raw)) from None
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise NoRoom(f"no room to write {out} ({e.strerror}); nothing was left at that name and {raw} is "
                         f"kept: free some space and run `timeline convert {raw} -o {out}`") from None
        raise UserError(f"cannot read {raw}: {e.strerror}") from None
    finally:
        if own_fd:
            os.close(raw_fd)
        if bar is not None:
            bar.stop()
    if res.damage is not None:
        click.echo(f"timeline: warning: {raw} is damaged at byte {res.damage.offset} ({res.damage.reason}); "
                   f"converted the {res.events} events before it", err=True)
    elif not res.finalized:
        click.echo(f"timeline: warning: {raw} was not finalized (recorder killed, or its disk filled up?); converted all "
                   f"{res.events} events it holds", err=True)
    return res


def _console():
    from rich.console import Console

    return Console(stderr=True)


@click.command("convert")
@click.argument("raw", type=click.Path(dir_okay=False))
@click.option("-o", "--output", help="Output trace (default: RAW with .pftrace or .json).")
@click.option("--format", "fmt", type=click.Choice(["perfetto", "chrome"]),
              help="perfetto (.pftrace protobuf, default) or chrome (JSON; gzip if OUTPUT ends in .gz).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary.")
@split_option
def convert_cmd(raw, output, fmt, quiet, split):
    """Convert a raw recording (.tlraw) into a Perfetto or Chrome JSON trace."""
    if not os.path.exists(raw):
        raise UserError(f"{raw} does not exist")
    if not os.access(raw, os.R_OK):
        raise UserError(f"cannot read {raw}: permission denied")
    if output == "":
        raise UserError("-o/--output needs a file name")
    fmt = infer_format(output or "", fmt)
    explicit = split_spec(split) is not None and not split.auto
    if explicit and fmt != "perfetto":
        raise UserError("--split writes Perfetto traces (a trace set); it cannot be used with Chrome JSON")
    if output is None:
        base = raw[:-6] if raw.endswith(".tlraw") else raw
        output = base + (".json" if fmt == "chrome" else ".pftrace")
    user = invoking_user()  # in sudo mode the raw log is read, and the trace written, as this user
    check_output(user, output, split)
    res = run_conversion(raw, output, fmt, user=user, quiet=quiet, split=split)
    if not quiet:
        click.echo(f"wrote {wrote(res)} ({human_bytes(res.out_bytes)}, {res.events} events)", err=True)


def check_output(user, output: str, split) -> None:
    """Fail early where the output cannot be written (a trace set's directory is checked when made)."""
    spec = split_spec(split)
    if spec is not None and not spec.auto:
        from ..converters.trace_set import set_path

        target = set_path(output)
        if os.path.isdir(target) and not os.path.islink(target):
            return
        output = target
    user.check_writable(output)


def wrote(res) -> str:
    """What a conversion wrote, for its summary line."""
    if res.chunks is None:
        return res.out_path
    n = len(res.chunks)
    return f"trace set {res.out_path}/ of {n} chunk{'s' if n > 1 else ''}"
