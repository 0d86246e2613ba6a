"""`timeline query TRACE "SQL"`: run PerfettoSQL on a trace, print the rows."""
from __future__ import annotations

import base64
import csv
import functools
import json
import os
import sys

import click

from ..errors import UserError
from ..identity import InvokingUser
from ..terminal import printable
from ..trace_processor import ENGINES, TraceProcessorConfig

MAX_SQL_BYTES = 16 << 20  # an -f file larger than this is not a query


def engine_options(f):
    """--engine / --tp-bin, shared with `timeline check`: the command gets
    them as one value, `tp_config` (a TraceProcessorConfig)."""
    @functools.wraps(f)
    def with_config(*args, engine, tp_bin, **kwargs):
        return f(*args, tp_config=TraceProcessorConfig(engine=engine, bin_path=tp_bin, offline=True), **kwargs)

    with_config = click.option("--tp-bin", type=click.Path(dir_okay=False),
                               help="trace_processor_shell binary for the native engine (else $TIMELINE_TP_BIN, "
                                    "perfetto's cache, PATH).")(with_config)
    return click.option("--engine", type=click.Choice(ENGINES), default="auto", show_default=True,
                        help="auto: native trace_processor_shell if one is found, else the bundled wasm "
                             "build.")(with_config)


def open_trace_fd(path: str, user: InvokingUser) -> int:
    """A descriptor on the trace, opened as `user` (sudo mode: the invoking
    user) and checked to be one trace_processor can load; one-line UserErrors."""
    from ..trace_file import open_loadable

    if not os.path.lexists(path):
        raise UserError(f"{printable(path)} does not exist")
    return open_loadable(path, user)


def load_or_fail(path: str, fd: int, tp_config: TraceProcessorConfig):
    """The trace on `fd` (named `path` in messages) loaded into a trace
    processor; its errors become one-line UserErrors."""
    from ..trace_processor import TraceProcessorError

    try:
        return tp_config.load(path, fd=fd)
    except TraceProcessorError as e:
        raise UserError(_one_line(e)) from None


def open_trace_or_fail(path: str, tp_config: TraceProcessorConfig, user: InvokingUser):
    """Loads a trace, opened once as `user` and read through that descriptor;
    every problem is a one-line UserError."""
    fd = open_trace_fd(path, user)
    try:
        return load_or_fail(path, fd, tp_config)
    finally:
        os.close(fd)


def _read_sql(name: str, user: InvokingUser) -> bytes:
    """The SQL file's bytes: stdin for '-', else read as `user`."""
    if name == "-":
        data = sys.stdin.buffer.read(MAX_SQL_BYTES + 1)
        if len(data) > MAX_SQL_BYTES:
            raise UserError(f"the SQL on stdin is larger than {MAX_SQL_BYTES >> 20} MiB")
        return data
    try:
        return user.read_file(name, limit=MAX_SQL_BYTES)
    except OSError as e:
        raise UserError(f"cannot read {printable(name)}: {e.strerror or e}") from None


def warn_if_incomplete(tp, fd: int) -> None:
    """One warning line on stderr when the trace is not whole
    (checks.completeness; `fd`: the trace file, whose own framing is read too)."""
    from ..checks.completeness import completeness_problem

    problem = completeness_problem(tp, fd=fd)
    if problem:
        click.echo(f"timeline: warning: {problem}", err=True)


def _one_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return "; ".join(lines[:1] + [ln for ln in lines[1:] if ln.startswith("File ")][:1]) or type(e).__name__


def _cell(v):
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    return v


def print_result(res, fmt: str) -> None:
    rows = [[_cell(v) for v in r] for r in res.rows]
    if fmt == "json":
        sys.stdout.write(json.dumps([dict(zip(res.columns, r)) for r in rows], indent=1) + "\n")
    elif fmt == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(res.columns)
        w.writerows(rows)
    else:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(show_lines=False, highlight=True, caption=f"{len(rows):,} row{'s' if len(rows) != 1 else ''}")
        for c in res.columns:
            table.add_column(Text(printable(c)))
        for r in rows:
            # Text, not str: a cell holding "[link=...]" must not become rich markup
            table.add_row(*(Text("NULL" if v is None else printable(v)) for v in r))
        Console(highlight=False).print(table)


def one_chunk_please(path: str) -> str:
    """Why a directory is not queried: a trace set is one trace per chunk."""
    from ..converters.trace_set import CHUNK_NAME, is_trace_set

    if not is_trace_set(path):
        return f"{printable(path)} is a directory, not a trace"
    return (f"{printable(path)} is a trace set (one trace per time chunk): query one chunk, e.g. "
            f"{printable(os.path.join(path, CHUNK_NAME.format(1)))} (its index.json gives each chunk's time range)")


@click.command("query")
@click.argument("trace", type=click.Path())
@click.argument("sql", required=False)
@click.option("-f", "--file", "sql_file", metavar="FILE", help="Read the SQL from a file ('-' = stdin).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="table (for the terminal), csv, or json (a list of row objects).")
@engine_options
def query(trace, sql, sql_file, fmt, tp_config):
    """Run PerfettoSQL on TRACE and print the result.

    \b
    timeline query run.pftrace "select name, count(*) from thread group by name"
    timeline query run.pftrace -f busiest.sql --format csv
    Several statements may be given; the last one's rows are printed.
    """
    from ..identity import invoking_user
    from .interrupt import interruptible

    if os.path.isdir(trace):
        raise UserError(one_chunk_please(trace))
    if (sql is None) == (sql_file is None):
        raise UserError("give the SQL either as an argument or with -f FILE (one of them)")
    user = invoking_user()  # in sudo mode the SQL file and the trace are read as this user
    try:  # an argument holds undecodable bytes as surrogates; a file is read as bytes
        text = sql if sql is not None else _read_sql(sql_file, user).decode("utf-8")
        text.encode("utf-8")
    except UnicodeError:
        raise UserError("the SQL is not valid UTF-8") from None
    if not text.strip():
        raise UserError("the SQL is empty")
    with interruptible():
        res = _run_query(trace, text, tp_config, user)
        print_result(res, fmt)


def _run_query(trace: str, text: str, tp_config: TraceProcessorConfig, user: InvokingUser):
    """The rows of `text` on the trace, after a warning when it is not whole."""
    from ..trace_processor import TraceProcessorError

    fd = open_trace_fd(trace, user)
    try:
        tp = load_or_fail(trace, fd, tp_config)
        try:
            warn_if_incomplete(tp, fd)
            return tp.query(text)
        except TraceProcessorError as e:
            raise UserError(f"query failed: {_one_line(e)}") from None
        finally:
            tp.close()
    finally:
        os.close(fd)
