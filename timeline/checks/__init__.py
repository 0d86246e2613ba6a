"""Built-in anomaly checks over a trace, run through trace_processor.

    from timeline.trace_processor import open_trace
    from timeline.checks import run_checks
    with open_trace("run.pftrace") as tp:
        report = run_checks(tp, "run.pftrace")
    for r in report.results: print(r.check.id, r.status, [f.message for f in r.findings])

The catalog (ids, thresholds, why/fix text) is in catalog.py, each check's
logic in sql/<id>.sql; see docs/checks.md.
"""
from .catalog import BY_ID, CATALOG, Check, Param
from .runner import (CheckConfigError, CheckResult, Finding, Report, detect_families, parse_params,
                     run_check, run_checks, select_checks)

__all__ = ["BY_ID", "CATALOG", "Check", "Param", "CheckConfigError", "CheckResult", "Finding", "Report",
           "detect_families", "parse_params", "run_check", "run_checks", "select_checks"]
