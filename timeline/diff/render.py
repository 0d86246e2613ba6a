"""The diff on a terminal: one rich table, step time first, then the rows
that changed most (significant ones first, by impact on step time), the
checks that changed and what only one trace has."""
from __future__ import annotations

import math
from typing import Optional

from ..terminal import printable
from .report import SECTIONS, DiffReport, Row

MAX_ROWS = 20            # body rows shown; --format json has them all
MIN_SHOWN = 6            # with fewer significant rows, the biggest others fill up to this many
NAME_WIDTH = 60          # kernel names run long
FINDING_WIDTH = 100      # a check's finding, cut to about a line (timeline check has it all)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _bytes(v: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.3g} {unit}"
    return f"{v:.3g} B"


def _dur(ns: float) -> str:
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3g} s"
    if a >= 1e6:
        return f"{ns / 1e6:.3g} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.3g} us"
    return f"{ns:.3g} ns"


def value(row: Row, v: Optional[float], share: Optional[float] = None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    text = {"ns": _dur, "bytes": _bytes, "fraction": lambda x: f"{100 * x:.1f}%"}.get(row.unit, lambda x: f"{x:.3g}")(v)
    return f"{text} ({100 * share:.0f}%)" if share is not None else text


def change(row: Row) -> str:
    if row.change is None or math.isnan(row.change):
        return "-"
    if row.unit == "fraction":
        text = f"{100 * row.change:+.1f} pts"
    else:
        text = value(row, row.change)
        text = text if text.startswith("-") else "+" + text
    rel = row.relative
    if rel is not None and row.unit != "fraction":
        text += f" ({100 * rel:+.0f}%)" if abs(rel) < 100 else f" (x{(row.candidate or 0) / row.baseline:.3g})"
    elif row.baseline == 0 and row.candidate:
        text += " (new)"
    return text


def mark(row: Row) -> tuple[str, str]:
    if row.significant is None:
        return "?", "dim"
    return ("*", "bold") if row.significant else ("", "dim")


def _label(row: Row) -> str:
    name = _clip(printable(row.name), NAME_WIDTH)
    if row.section == "step":
        return f"step time {name}" if name != "run" else "run length (no steps)"
    metric = row.metric.replace(" per ", "/")
    return f"{SECTIONS[row.section]}: {name}" + ("" if row.section in ("state", "python") else f" · {metric}")


def shown_rows(report: DiffReport) -> tuple[list[Row], int]:
    """The rows the table shows, and how many others there are."""
    body = [r for r in report.rows if r.section != "step"]
    sig = [r for r in body if r.significant]
    shown = sig[:MAX_ROWS]
    if len(shown) < MIN_SHOWN:
        shown += [r for r in body if not r.significant][:MIN_SHOWN - len(shown)]
    return [r for r in report.rows if r.section == "step"] + shown, len(body) - len(shown)


def _side(ctx: dict) -> str:
    steps = (f"{ctx['steps']} steps ({ctx['step_source']} '{ctx['step_label']}')" if ctx.get("steps")
             else f"no steps ({ctx.get('step_label')})")
    return f"{printable(ctx.get('trace'))}: {steps}, {ctx.get('duration_s')} s"


def render_text(report: DiffReport, console) -> None:
    from rich.table import Table
    from rich.text import Text

    a, b = report.baseline, report.candidate
    console.print(Text.assemble(("timeline diff  ", "bold"), ("baseline ", "dim"), _side(a)))
    console.print(Text.assemble(("               candidate ", "dim"), _side(b)))
    for key in ("command", "machine"):
        if a.get(key) != b.get(key):
            console.print(Text(f"  {key} differs: {printable(a.get(key))}  ->  {printable(b.get(key))}", "yellow"))
    rows, hidden = shown_rows(report)
    per = report.settings.get("per", "step")
    table = Table(show_lines=False, pad_edge=False, box=None, header_style="bold")
    table.add_column("", width=1)
    table.add_column("what", overflow="fold")
    table.add_column("baseline", justify="right")
    table.add_column("candidate", justify="right")
    table.add_column("change", justify="right")
    table.add_column(f"impact/{'step' if per == 'step' else 's'}", justify="right")
    for row in rows:
        sym, style = mark(row)
        impact = "" if row.section == "step" or not row.impact_ns else (
            ("+" if row.impact_ns > 0 else "") + _dur(row.impact_ns))
        table.add_row(Text(sym, "bold red" if sym == "*" else "dim"), Text(_label(row)),
                      value(row, row.baseline, row.share_baseline), value(row, row.candidate, row.share_candidate),
                      Text(change(row), "" if row.significant or row.section == "step" else "dim"),
                      Text(impact, "dim" if not row.significant else ""))
    console.print(table)
    s = report.settings
    console.print(Text(f"* significant: the {100 * s['confidence']:g}% bootstrap interval of the change leaves out 0, "
                       f"and the change is at least {100 * s['min_change']:g}% and {100 * s['min_impact']:g}% of "
                       f"the baseline's median step; ? too few samples to tell"
                       + (f"; {hidden} more rows in --format json" if hidden else ""), "dim"))
    if report.without_stack:
        _print_without_stack(report.without_stack, console)
    if report.checks:
        console.print(Text("checks:", "bold"))
        for c in report.checks:
            console.print(Text(f"  {c.change:9} {c.check}: {c.baseline} -> {c.candidate}"
                               + (f"  {_clip(printable(c.finding), FINDING_WIDTH)}" if c.finding else ""),
                               "red" if c.change == "appeared" else "green" if c.change == "vanished" else "yellow"))
    for label, only in (("baseline", report.only_baseline), ("candidate", report.only_candidate)):
        if only:
            console.print(Text(f"only the {label} has: {', '.join(only)} (not compared)", "yellow"))
    if report.ranks:
        _print_ranks(report, console)
    for note in report.notes:
        console.print(Text(f"note: {note}", "dim"))
    reg = report.step_regression()
    if reg is not None:
        row = report.step_row()
        verdict = "slower" if reg > 0 else "faster"
        sig = "" if row.significant else " (not significant)"
        console.print(Text(f"median step {100 * abs(reg):.1f}% {verdict}{sig}", "bold"))


def _print_without_stack(rows: list[Row], console) -> None:
    """The main thread's samples taken without a Python stack, a line per bucket: counted in the
    Python shares, yet no function of the program, so apart from the table (not ranked)."""
    from rich.text import Text

    console.print(Text("Python samples without a stack (in the shares above; no function):", "bold"))
    for row in rows:
        sym, _ = mark(row)
        console.print(Text(f"{sym or ' '} {row.name}: {value(row, row.baseline)} -> {value(row, row.candidate)} "
                           f"({change(row)}): {row.without_stack}", "" if row.significant else "dim"))


def _rank_line(rd) -> str:
    """A rank's diff in a line: its median step change, its first significant row."""
    rep = rd.report
    reg = rep.step_regression()
    step = (f"median step {100 * reg:+.1f}%" + ("" if rep.step_row().significant else " (not significant)")
            if reg is not None else "no step time")
    top = next((r for r in rep.significant_rows() if r.section != "step"), None)
    first = f"; first: {_label(top)} {change(top)}" if top else ""
    checks = f"; checks: {', '.join(f'{c.check} {c.change}' for c in rep.checks)}" if rep.checks else ""
    return f"  {printable(rd.key)}: {step}{first}{checks}"


def _print_ranks(report: DiffReport, console) -> None:
    from rich.text import Text

    rs = report.ranks
    console.print(Text(f"per rank (matched by {rs.matched_by}; the table above pools them):", "bold"))
    for rd in rs.compared:
        console.print(Text(_rank_line(rd), "" if rd.report.significant_rows() else "dim"))
    for label, only in (("baseline", rs.only_baseline), ("candidate", rs.only_candidate)):
        if only:
            console.print(Text(f"only in the {label}: {', '.join(printable(k) for k in only)}", "yellow"))
