"""The jobs the worker runs on a loaded trace, one per tool: each takes the
trace processor, the descriptor on the trace file, its resolved path, its
name as the agent gave it, and the tool's arguments, and returns JSON values.
The same trace processor answers every call on the trace: the tables the
checks make (_tl_*) stay, and are made again by the next run."""
from __future__ import annotations

from ..errors import UserError
from . import queries


def checks(tp, fd, path, name, only=None, params=None) -> dict:
    """Exactly what `timeline check TRACE --format json` prints for one trace."""
    from ..checks import run_checks
    from ..checks.report import to_json
    from ..commands.check import _selection
    from ..trace_processor import TraceProcessorError

    ids, overrides = _selection(",".join(only) if only is not None else None,
                                [f"{k}={v}" for k, v in (params or {}).items()])
    try:
        # the file itself is read for completeness by its resolved path; the report names it as given
        report = run_checks(tp, path, only=ids, params=overrides)
    except TraceProcessorError as e:
        raise UserError(f"checks failed: {str(e).strip().splitlines()[0]}") from None
    report.trace = name
    return to_json(report)


def summary(tp, fd, path, name) -> dict:
    return {"trace": name, **queries.summary(tp, fd)}


def describe(tp, fd, path, name, tid=None, rank=None, start_s=None, end_s=None, top=10) -> dict:
    return {"trace": name, **queries.describe_thread(tp, tid, rank, start_s, end_s, top)}


def top(tp, fd, path, name, what, limit=20, start_s=None, end_s=None, tid=None) -> dict:
    return {"trace": name, **queries.top(tp, what, limit, start_s, end_s, tid)}


def sql(tp, fd, path, name, query="", max_rows=1000) -> dict:
    """The last statement's rows, at most `max_rows` (the query was checked
    read-only by the server; checked again here, where it runs)."""
    import base64

    from ..checks.completeness import completeness_problem
    from .readonly_sql import check_read_only, with_row_limit

    check_read_only(query)
    res = tp.query(with_row_limit(query, max_rows + 1))
    rows = [[base64.b64encode(v).decode() if isinstance(v, bytes) else v for v in r] for r in res.rows]
    return {"trace": name, "columns": res.columns, "rows": rows[:max_rows], "row_count": min(len(rows), max_rows),
            "truncated": len(rows) > max_rows, "incomplete": completeness_problem(tp, fd=fd)}


# what an agent may set of timeline.diff.compare (the rest, engine and identity, the server decides)
DIFF_OPTIONS = {"checks": bool, "min_change": (int, float), "min_impact": (int, float), "confidence": (int, float)}


def diff(baseline: str, baseline_name: str, candidate: str, candidate_name: str, options=None,
         tp_config=None) -> dict:
    """timeline.diff.compare on the two traces (another part of timeline;
    the server offers this job only when it imports)."""
    from ..diff import compare

    options = dict(options or {})
    for key, value in options.items():
        want = DIFF_OPTIONS.get(key)
        if want is None:
            raise ValueError(f"unknown diff option {key!r} (known: {', '.join(DIFF_OPTIONS)})")
        if not isinstance(value, want) or (want is not bool and isinstance(value, bool)):
            raise ValueError(f"diff option {key!r} has the wrong type")
    report = compare(baseline, candidate, tp_config=tp_config, **options)
    out = report.to_json()
    if isinstance(out, str):
        import json

        out = json.loads(out)
    return {"baseline": baseline_name, "candidate": candidate_name, "diff": out}


JOBS = {"checks": checks, "summary": summary, "describe": describe, "top": top, "sql": sql}
