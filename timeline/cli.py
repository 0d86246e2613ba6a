"""Command-line entry point: `timeline <command>`."""
from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_starting(signum, frame):
    """Ctrl-C while the commands are imported (a few hundred ms): nothing has
    been created yet, so leave at once, quietly, like an interrupted command."""
    os.write(2, b"timeline: interrupted\n")
    os._exit(130)


if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)

import click  # noqa: E402

from . import __version__  # noqa: E402
from .errors import UserError  # noqa: E402
from .terminal import printable  # noqa: E402


def _version() -> str:
    """The installed distribution's version; the source tree's when run from a
    checkout that was never installed (pyproject takes it from __version__)."""
    from importlib import metadata

    try:
        return metadata.version("timeline")
    except metadata.PackageNotFoundError:
        return __version__


class _Group(click.Group):
    """Turns UserError (and trace-reading errors) and bad usage into one line,
    no traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UserError as e:
            click.echo(f"timeline: error: {printable(e)}", err=True)
            sys.exit(e.exit_code)
        except click.UsageError as e:  # click would print usage, a hint and the error: three lines
            where = e.ctx.command_path if e.ctx is not None else ctx.command_path
            click.echo(f"timeline: error: {printable(e.format_message())} (see '{where} --help')", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            # Ctrl-C outside a command's own handling (while it imports, say): the same
            # line and code as theirs, not click's "Aborted!" and 1
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            click.echo("timeline: interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), prog_name="timeline")
def main():
    """Record Python ML training with eBPF into one Perfetto timeline."""


def _register():
    from .commands import convert, record

    main.add_command(record.record)
    main.add_command(convert.convert_cmd)
    from .commands import check, diff, doctor, mcp, merge, query, view

    main.add_command(query.query)
    main.add_command(check.check)
    main.add_command(view.view)
    main.add_command(doctor.doctor)
    main.add_command(merge.merge_cmd)
    main.add_command(mcp.mcp_cmd)
    main.add_command(diff.diff)


_register()
if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:  # commands get Python's usual Ctrl-C
    signal.signal(signal.SIGINT, signal.default_int_handler)

if __name__ == "__main__":
    main()
