"""`timeline diff BASELINE CANDIDATE`: what changed between two runs."""
from __future__ import annotations

import json
import sys

import click

from ..errors import UserError
from .query import engine_options

EXIT_REGRESSION = 1  # --fail-on-regression reached (2 stays "timeline itself failed")


@click.command("diff")
@click.argument("baseline", type=click.Path())
@click.argument("candidate", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--fail-on-regression", "fail_pct", type=click.FloatRange(min=0), metavar="PCT",
              help=f"Exit {EXIT_REGRESSION} when the median step time is more than PCT % slower (for CI).")
@click.option("--min-change", type=click.FloatRange(min=0), default=5, show_default=True, metavar="PCT",
              help="Smallest change (% of the baseline's value) a row may be significant at.")
@click.option("--min-impact", type=click.FloatRange(min=0), default=5, show_default=True, metavar="PCT",
              help="Smallest effect on step time (% of the baseline's median step) a row may be significant at.")
@click.option("--no-checks", is_flag=True, help="Do not run the checks on both traces (faster).")
@engine_options
def diff(baseline, candidate, fmt, fail_pct, min_change, min_impact, no_checks, tp_config):
    """Compare two runs: step time (p50/p90), the main thread's states per
    step, CUDA calls, GPU kernels, copies, launch delays, Python functions
    and the checks' findings, each change with a significance mark (a
    bootstrap interval), sorted by impact on step time.  A side may be a
    trace set (NAME.tlset/: its chunks merged); two directories of per-rank
    traces are compared rank by rank and with all ranks pooled.

    \b
    timeline diff yesterday.pftrace today.pftrace
    timeline diff base.pftrace new.pftrace --format json --fail-on-regression 5
    timeline diff base.tlset new.tlset;  timeline diff ranks-old/ ranks-new/
    Exit status: 0; 1 with --fail-on-regression when the median step time
    regressed by more than PCT %; 2 on errors; 130 on Ctrl-C.
    """
    from ..diff import compare
    from ..identity import invoking_user
    from .interrupt import interruptible

    with interruptible():
        def progress(msg):
            if fmt == "text" and sys.stderr.isatty():
                click.echo(f"timeline: {msg}...", err=True)

        report = compare(baseline, candidate, tp_config=tp_config, user=invoking_user(), checks=not no_checks,
                         min_change=min_change / 100, min_impact=min_impact / 100, progress=progress)
        if fmt == "json":
            sys.stdout.write(json.dumps(report.to_json(), indent=1) + "\n")
        else:
            from rich.console import Console

            from ..diff.render import render_text

            render_text(report, Console(highlight=False))
    if fail_pct is not None:
        reg = report.step_regression()
        if reg is None:
            raise UserError("--fail-on-regression: the step time of the baseline is unknown")
        if reg * 100 > fail_pct:
            click.echo(f"timeline: median step time regressed by {100 * reg:.1f}% (more than {fail_pct:g}%)",
                       err=True)
            sys.exit(EXIT_REGRESSION)
