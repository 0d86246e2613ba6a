"""`timeline query TRACE "SQL"`: run PerfettoSQL on a trace, print the rows."""
from __future__ import annotations

import base64
import csv
import json
import os
import sys

import click

from ..errors import UserError
from ..terminal import printable

ENGINES = ("auto", "wasm", "native")
MAX_SQL_BYTES = 16 << 20  # an -f file larger than this is not a query


def engine_options(f):
    """--engine / --tp-bin, shared with `timeline check`."""
    f = click.option("--tp-bin", type=click.Path(dir_okay=False),
                     help="trace_processor_shell binary for the native engine (else $TIMELINE_TP_BIN, "
                          "perfetto's cache, PATH).")(f)
    return click.option("--engine", type=click.Choice(ENGINES), default="auto", show_default=True,
                        help="auto: native trace_processor_shell if one is found, else the bundled wasm "
                             "build.")(f)


def open_trace_or_fail(path: str, engine: str, tp_bin):
    """Loads a trace, opened once as the invoking user (sudo mode) and read
    through that descriptor; every problem is a one-line UserError."""
    from .. import trace_file
    from ..trace_processor import TraceProcessorError, open_trace

    if not os.path.lexists(path):
        raise UserError(f"{printable(path)} does not exist")
    fd = trace_file.open_trace_file(path, trace_file.invoking_user())
    try:
        trace_file.check_loadable(fd, path)
        return open_trace(path, engine=engine, bin_path=tp_bin, offline=True, fd=fd)
    except TraceProcessorError as e:
        raise UserError(_one_line(e)) from None
    finally:
        os.close(fd)


def _read_sql(name: str) -> bytes:
    """The SQL file's bytes: stdin for '-', else read as the invoking user (sudo mode)."""
    from .. import safe_input, trace_file

    if name == "-":
        data = sys.stdin.buffer.read(MAX_SQL_BYTES + 1)
        if len(data) > MAX_SQL_BYTES:
            raise UserError(f"the SQL on stdin is larger than {MAX_SQL_BYTES >> 20} MiB")
        return data
    try:
        return safe_input.read_file(name, trace_file.invoking_user(), limit=MAX_SQL_BYTES)
    except OSError as e:
        raise UserError(f"cannot read {printable(name)}: {e.strerror or e}") from None


def warn_if_incomplete(tp) -> None:
    """One warning line on stderr when the trace is not whole (checks.completeness)."""
    from ..checks.completeness import completeness_problem

    problem = completeness_problem(tp)
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


@click.command("query")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.argument("sql", required=False)
@click.option("-f", "--file", "sql_file", metavar="FILE", help="Read the SQL from a file ('-' = stdin).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="table (for the terminal), csv, or json (a list of row objects).")
@engine_options
def query(trace, sql, sql_file, fmt, engine, tp_bin):
    """Run PerfettoSQL on TRACE and print the result.

    \b
    timeline query run.pftrace "select name, count(*) from thread group by name"
    timeline query run.pftrace -f busiest.sql --format csv
    Several statements may be given; the last one's rows are printed.
    """
    from ..trace_processor import TraceProcessorError

    if (sql is None) == (sql_file is None):
        raise UserError("give the SQL either as an argument or with -f FILE (one of them)")
    try:  # an argument holds undecodable bytes as surrogates; a file is read as bytes
        text = sql if sql is not None else _read_sql(sql_file).decode("utf-8")
        text.encode("utf-8")
    except UnicodeError:
        raise UserError("the SQL is not valid UTF-8") from None
    if not text.strip():
        raise UserError("the SQL is empty")
    from .interrupt import interruptible

    with interruptible():
        tp = open_trace_or_fail(trace, engine, tp_bin)
        try:
            warn_if_incomplete(tp)
            res = tp.query(text)
        except TraceProcessorError as e:
            raise UserError(f"query failed: {_one_line(e)}") from None
        finally:
            tp.close()
        print_result(res, fmt)
