"""Render a check Report: a terminal report (rich) or a JSON document."""
from __future__ import annotations

from typing import Any, Optional

from ..terminal import printable
from .runner import STATUS_ORDER, Finding, Report

_BADGE = {
    "failed": ("FAILED", "bold white on red"),
    "error": ("ERROR", "bold red"),
    "warning": ("WARNING", "bold yellow"),
    "info": ("INFO", "bold blue"),
    "ok": ("OK", "bold green"),
    "n/a": ("N/A", "dim"),
    "not recorded": ("NOT RECORDED", "dim"),
}


def fmt_dur(ns: Optional[float]) -> str:
    if ns is None:
        return "?"
    if ns >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e3:.1f} us"


def fmt_window(f: Finding, start: Optional[int]) -> Optional[str]:
    if f.ts is None:
        return None
    at = f"+{(f.ts - (start or 0)) / 1e9:.3f} s"
    return f"at {at} for {fmt_dur(f.dur)}" if f.dur else f"at {at}"


def _fmt_value(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return printable(v)
    if abs(v) >= 1000 or float(v).is_integer():
        return f"{v:,.0f}"
    return f"{v:.4g}"


def counts(report: Report) -> dict[str, int]:
    out = {s: 0 for s in STATUS_ORDER}
    for r in report.results:
        out[r.status] += 1
    return out


def summary_line(report: Report) -> str:
    c = counts(report)
    parts = [f"{c[s]} {s}" for s in STATUS_ORDER if c[s]]
    n = len(report.results)
    return f"{n} check{'s' if n != 1 else ''}: " + ", ".join(parts)


def render_text(report: Report, console, verbose: bool = False) -> None:
    """Print the report on a rich Console: one block per check (catalog
    order), its worst findings first; wrapped lines keep their indent."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    present = [k for k, v in report.families.items() if v] or ["none"]
    span = (report.end_ts - report.start_ts) if report.start_ts is not None and report.end_ts else None
    console.print(Text.assemble(("timeline check ", "bold"), printable(report.trace or ""),
                                f"  ({report.engine + ' engine' if report.engine else 'from the index'}, "
                                f"{fmt_dur(span)} of trace; "
                                f"recorded: {', '.join(present)})"))
    if report.incomplete:
        console.print(Text("warning: " + report.incomplete, "bold yellow"))
    grid = Table.grid(padding=(0, 2), pad_edge=False)
    grid.add_column(no_wrap=True, min_width=12)
    grid.add_column(ratio=1)

    def indent(text, n):
        return Padding(text, (0, 0, 0, n))

    for r in report.results:
        label, badge_style = _BADGE[r.status]
        parts: list = [Text.assemble((r.check.title, "bold"), (f"  [{r.check.id}]", "dim"))]
        if r.status == "not recorded":
            parts.append(Text(printable(r.note or ""), "dim"))
        elif r.status == "failed":
            parts.append(Text(f"could not run: {printable(r.error)}", "red"))
        if r.note and r.status != "not recorded":
            parts.append(Text(printable(r.note), "dim"))
        for f in r.findings:
            main = f.severity != "info" or r.status == "info"
            quiet = f.severity in ("ok", "n/a")
            msg = Text(("" if main else "- ") + printable(f.message), "dim" if quiet else "")
            parts.append(msg if main else indent(msg, 2))
            details = []
            if not quiet or verbose:
                win = fmt_window(f, report.start_ts)
                details += [win] if win else []
            if (main and not quiet) or verbose:
                details += [f"{k}={_fmt_value(v)}" for k, v in f.evidence.items()]
            if details:
                parts.append(indent(Text(" · ".join(details), "dim"), 4 if main else 6))
            if not main and f.hint:
                parts.append(indent(Text("-> " + printable(f.hint), "italic"), 6))
        if r.status in ("error", "warning"):
            hint = next((f.hint for f in r.findings if f.hint and f.severity in ("error", "warning")), None)
            parts.append(indent(Text.assemble(("fix: ", "bold"), printable(hint or r.check.fix)), 4))
        grid.add_row(Text(label, badge_style), Group(*parts))
        grid.add_row("", "")
    console.print(grid)
    console.print(Text(summary_line(report), "bold"))


def finding_dict(f: Finding, start: Optional[int]) -> dict:
    return {
        "severity": f.severity,
        "finding": f.message,
        "ts": f.ts,
        "dur": f.dur,
        "start_s": None if f.ts is None or start is None else round((f.ts - start) / 1e9, 9),
        "hint": f.hint,
        "evidence": f.evidence,
    }


def to_json(report: Report) -> dict:
    return {
        "trace": report.trace,
        "engine": report.engine,
        "trace_start_ns": report.start_ts,
        "trace_end_ns": report.end_ts,
        "families": report.families,
        "complete": report.incomplete is None,
        "incomplete": report.incomplete,
        "worst": report.worst(),
        "summary": {k: v for k, v in counts(report).items()},
        "checks": [{
            "id": r.check.id,
            "title": r.check.title,
            "families": list(r.check.families),
            "status": r.status,
            "why": r.check.why,
            "fix": r.check.fix,
            "params": r.params,
            "seconds": round(r.seconds, 4),
            "note": r.note,
            "error": r.error,
            "findings": [finding_dict(f, report.start_ts) for f in r.findings],
        } for r in report.results],
    }
