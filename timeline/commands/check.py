"""`timeline check TRACE`: run the built-in anomaly checks and report."""
from __future__ import annotations

import json
import os
import sys

import click

from ..errors import UserError
from ..identity import InvokingUser
from ..trace_processor import TraceProcessorConfig
from .query import _one_line, engine_options, open_trace_or_fail

FAIL_LEVELS = ("info", "warning", "error")
EXIT_FINDINGS = 1  # --fail-on reached (exit 2 stays "timeline itself failed")


def _list_catalog() -> None:
    from ..checks import CATALOG

    for c in CATALOG:
        click.echo(f"{c.id}  {c.title}  (data: {' or '.join(c.families)})")
        for p in c.params:
            click.echo(f"    {c.id}.{p.name}={p.default:g}  {p.help}")
        click.echo("")


def _many(trace: str) -> list[str] | None:
    """The traces a directory or glob names; None for a single trace file."""
    from .merge import expand_inputs

    if os.path.isfile(trace):
        return None
    if os.path.isdir(trace) or any(c in trace for c in "*?["):
        paths = expand_inputs((trace,))
        return [p for p in paths if os.path.isfile(p)]
    return None


def _check_many(paths, fmt, fail_on, ids, overrides, tp_config: TraceProcessorConfig, user: InvokingUser,
                executor=None):
    import time

    from ..checks.fleet import fleet_summary, run_fleet

    t0 = time.monotonic()
    reports = run_fleet(paths, tp_config, user, ids, overrides, executor=executor)
    seconds = time.monotonic() - t0
    fleet = fleet_summary(reports)
    if fmt == "json":
        sys.stdout.write(json.dumps({"fleet": {**fleet, "seconds": round(seconds, 2)}, "reports": reports},
                                    indent=1) + "\n")
    else:
        _print_fleet(paths, reports, fleet, seconds)
    if fleet["unreadable"]:
        raise UserError(f"{fleet['unreadable']} of {len(paths)} traces could not be checked (see the table)")
    worst = [r.get("worst") for r in reports if r.get("worst")]
    if fail_on and any(FAIL_LEVELS.index(w) >= FAIL_LEVELS.index(fail_on) for w in worst if w in FAIL_LEVELS):
        sys.exit(EXIT_FINDINGS)


def _print_fleet(paths, reports, fleet, seconds) -> None:
    """The per-trace table, the incomplete traces and the fleet line, on the terminal."""
    from rich.console import Console
    from rich.table import Table

    from ..checks.fleet import headline
    from ..terminal import printable

    table = Table(title=f"{len(paths)} traces, {seconds:.1f} s", show_lines=False)
    for col in ("trace", "worst", "errors", "warnings", "worst finding"):
        table.add_column(col, overflow="fold")
    for rep in reports:
        if "checks" not in rep:
            table.add_row(printable(rep["trace"]), "unreadable", "", "", printable(rep["error"]))
            continue
        summ = rep["summary"]
        table.add_row(printable(rep["trace"]), rep["worst"] or "ok", str(summ.get("error", 0)),
                      str(summ.get("warning", 0)), printable(headline(rep)))
    con = Console(highlight=False)
    con.print(table)
    for rep in reports:
        if rep.get("complete") is False:
            con.print(f"warning: {printable(rep['trace'])}: {printable(rep['incomplete'])}", style="bold yellow")
    if fleet["by_check"]:
        con.print("fleet: " + "; ".join(f"{cid} error in {v['error']}, warning in {v['warning']}"
                                        for cid, v in fleet["by_check"].items()))
    else:
        con.print("fleet: no warnings or errors")


@click.command("check")
@click.argument("trace", type=click.Path(dir_okay=True), required=False)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--fail-on", type=click.Choice(FAIL_LEVELS),
              help=f"Exit {EXIT_FINDINGS} when a finding is at least this severe (for CI).")
@click.option("--param", "params", multiple=True, metavar="CHECK.NAME=VALUE",
              help="Override a threshold, e.g. input_stall.warn_fraction=0.2 (repeatable).")
@click.option("--only", metavar="ID,...", help="Run only these checks (comma separated ids).")
@click.option("--annotate", "annotate_out", type=click.Path(dir_okay=False), metavar="OUT",
              help="Also write a copy of TRACE with the findings on a 'timeline findings' track.")
@click.option("-v", "--verbose", is_flag=True, help="Show evidence numbers for passing checks too.")
@click.option("--list", "list_only", is_flag=True, help="List the checks and their thresholds, then exit.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where a directory's traces or a set's chunks are checked: a local process pool, or a Ray "
                   "cluster (pip install 'timeline[ray]'; the paths must be visible to its nodes).")
@click.option("--address", metavar="ADDR", help="With --executor ray: the cluster (e.g. auto, ray://host:10001); "
                                                "without it a local Ray instance is started.")
@engine_options
def check(trace, fmt, fail_on, params, only, annotate_out, verbose, list_only, tp_config, executor, address):
    """Run the built-in checks on TRACE (input stalls, CPU contention, CUDA
    launch/sync/allocator/graph problems, block I/O, driver ioctls, drops).
    TRACE may be a directory or a glob: every trace is checked, in parallel,
    with one table and a fleet summary; or a trace set (a directory with an
    index.json): its chunks are checked in parallel and merged into one report.

    Checks whose data is not in the trace say "not recorded". Exit status:
    0, or 1 with --fail-on when a finding reaches that severity, 2 on errors,
    130 on Ctrl-C.
    """
    from .interrupt import interruptible

    with interruptible():  # Ctrl-C anywhere in it: one line, exit 130
        _check(trace, fmt, fail_on, params, only, annotate_out, verbose, list_only, tp_config,
               _executor(executor, address))


def _executor(kind: str, address):
    from ..checks.executors import Executor, require_ray

    if address and kind != "ray":
        raise UserError("--address goes with --executor ray")
    if kind == "ray":
        require_ray()  # missing: one line saying how to install it, before any work
    return Executor(kind, address)


def _check(trace, fmt, fail_on, params, only, annotate_out, verbose, list_only, tp_config, executor=None):
    from ..identity import invoking_user

    if list_only:
        _list_catalog()
        return
    if trace is None:
        raise UserError("missing TRACE (or use --list)")
    ids, overrides = _selection(only, params)
    user = invoking_user()  # in sudo mode traces are read, and --annotate written, as this user
    from ..checks.traceset import is_trace_set

    if is_trace_set(trace):
        if annotate_out:
            raise UserError("--annotate takes one trace, not a trace set")
        from ..checks.traceset import check_set

        report = check_set(trace, tp_config, user, ids, overrides, executor=executor)
        _print_report(report, fmt, verbose)
        if report.incomplete:
            raise UserError(f"not every chunk could be checked: {report.incomplete}")
        worst = report.worst()
        if fail_on and worst and FAIL_LEVELS.index(worst) >= FAIL_LEVELS.index(fail_on):
            sys.exit(EXIT_FINDINGS)
        return
    many = _many(trace)
    if many is not None:
        if annotate_out:
            raise UserError("--annotate takes one trace, not a directory or glob")
        if not many:
            raise UserError(f"no trace matches {trace}")
        return _check_many(many, fmt, fail_on, ids, overrides, tp_config, user, executor)
    if annotate_out:
        user.check_writable(annotate_out)
        if os.path.abspath(annotate_out) == os.path.abspath(trace):
            raise UserError("--annotate must name a new file, not the trace itself")
    report = _run_checks(trace, tp_config, user, ids, overrides)
    _print_report(report, fmt, verbose)
    if annotate_out:
        _annotate(trace, annotate_out, report, user)
    failed = [r.check.id for r in report.results if r.status == "failed"]
    if failed:
        raise UserError(f"check(s) could not run: {', '.join(failed)}")
    worst = report.worst()
    if fail_on and worst and FAIL_LEVELS.index(worst) >= FAIL_LEVELS.index(fail_on):
        sys.exit(EXIT_FINDINGS)


def _selection(only, params):
    """(check ids or None for all, threshold overrides) from --only and --param."""
    from ..checks import CheckConfigError, parse_params, select_checks
    from ..checks.catalog import CATALOG

    try:
        overrides = parse_params(params)
        ids = [c.strip() for c in only.split(",") if c.strip()] if only is not None else None
        if ids == []:
            raise CheckConfigError(f"--only {only!r} names no check (known: {', '.join(c.id for c in CATALOG)})")
        select_checks(ids)
    except CheckConfigError as e:
        raise UserError(str(e)) from None
    return ids, overrides


def _run_checks(trace: str, tp_config: TraceProcessorConfig, user: InvokingUser, ids, overrides):
    """The report on one trace; a trace_processor failure is one line (with the cut, if the file is cut)."""
    from dataclasses import replace

    from ..checks.runner import check_trace
    from ..trace_processor import TraceProcessorError

    def load(memory64):
        config = tp_config if memory64 is None else replace(tp_config, engine="wasm", wasm_memory64=memory64)
        return open_trace_or_fail(trace, config, user)

    try:
        return check_trace(load, trace, only=ids, params=overrides)
    except TraceProcessorError as e:
        from ..checks.completeness import file_problem

        # a cut JSON trace loads as nothing at all: the cut is the news, not the missing table
        cut = file_problem(trace)
        raise UserError(f"checks failed: {_one_line(e)}" + (f"; {cut}" if cut else "")) from None


def _print_report(report, fmt: str, verbose: bool) -> None:
    from ..checks.report import render_text, to_json

    if fmt == "json":
        sys.stdout.write(json.dumps(to_json(report), indent=1) + "\n")
    else:
        from rich.console import Console

        render_text(report, Console(highlight=False), verbose=verbose)


def _annotate(trace: str, annotate_out: str, report, user: InvokingUser) -> None:
    """--annotate: a copy of the trace with the findings on their own track, written as `user`."""
    from ..checks.annotate import write_annotated

    try:
        n = write_annotated(trace, annotate_out, report, user=user)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot write {annotate_out}: {e}") from None
    click.echo(f"wrote {annotate_out} ({n} finding{'s' if n != 1 else ''} on the 'timeline findings' track)",
               err=True)
