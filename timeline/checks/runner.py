"""Run catalog checks against a loaded trace and collect their findings."""
from __future__ import annotations

import os
import re
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ..trace_processor import TraceProcessorError
from .catalog import BY_ID, CATALOG, DATA, FAMILY_HELP, SQL_DIR, WINDOW_CAP, Check
from .completeness import completeness_problem

# Worst first; 'ok', 'n/a' and 'not recorded' are statuses, not findings.
SEVERITIES = ("error", "warning", "info")
STATUS_ORDER = ("failed", "error", "warning", "info", "ok", "n/a", "not recorded")

# one row, a column per kind of data: is it in the trace?
FAMILY_SQL = "select\n" + ",\n".join(f"  {d.sql} as {d.name}" for d in DATA)

_PARAM_RE = re.compile(r"\$\{([a-z_][a-z0-9_]*)\}")
_CORE_COLUMNS = ("severity", "finding", "ts", "dur", "hint")


class CheckConfigError(ValueError):
    """Bad --only / --param input (unknown check or parameter, bad value)."""


@dataclass
class Finding:
    severity: str
    message: str
    ts: Optional[int] = None
    dur: Optional[int] = None
    hint: Optional[str] = None
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckResult:
    check: Check
    status: str
    findings: list[Finding]
    params: dict[str, float]
    seconds: float = 0.0
    error: Optional[str] = None  # status 'failed': what trace_processor said
    note: Optional[str] = None   # status 'not recorded': which data is missing


@dataclass
class Report:
    trace: str
    engine: Optional[str]  # None: no engine ran (every check from a trace set's index)
    start_ts: Optional[int]
    end_ts: Optional[int]
    families: dict[str, bool]
    results: list[CheckResult]
    incomplete: Optional[str] = None  # completeness.completeness_problem: the trace is not whole

    def worst(self) -> Optional[str]:
        """Most severe finding severity over all checks, or None."""
        sev = {f.severity for r in self.results for f in r.findings}
        return next((s for s in SEVERITIES if s in sev), None)


def select_checks(only: Optional[Iterable[str]] = None) -> list[Check]:
    if not only:
        return list(CATALOG)
    wanted = [c.strip() for c in only if c.strip()]
    unknown = [c for c in wanted if c not in BY_ID]
    if unknown:
        raise CheckConfigError(f"unknown check {', '.join(unknown)} (known: {', '.join(BY_ID)})")
    return [c for c in CATALOG if c.id in wanted]  # catalog order: dropped events first


def parse_params(items: Iterable[str]) -> dict[str, dict[str, float]]:
    """['input_stall.warn_fraction=0.2', ...] -> {'input_stall': {'warn_fraction': 0.2}}."""
    out: dict[str, dict[str, float]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        cid, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise CheckConfigError(f"--param {item!r}: expected CHECK.NAME=VALUE")
        check = BY_ID.get(cid)
        if check is None:
            raise CheckConfigError(f"--param {item!r}: unknown check {cid!r} (known: {', '.join(BY_ID)})")
        if name not in check.defaults():
            known = ", ".join(check.defaults()) or "none"
            raise CheckConfigError(f"--param {item!r}: {cid} has no parameter {name!r} (it has: {known})")
        try:
            num = float(value)
        except ValueError:
            raise CheckConfigError(f"--param {item!r}: {value!r} is not a number") from None
        if num != num or num in (float("inf"), float("-inf")):
            raise CheckConfigError(f"--param {item!r}: {value!r} is not a finite number")
        spec = next(p for p in check.params if p.name == name)
        if not spec.lo <= num <= spec.hi:  # e.g. window_s=0 would make the SQL build endless windows
            rng = f">= {spec.lo:g}" if spec.hi == float("inf") else f"between {spec.lo:g} and {spec.hi:g}"
            raise CheckConfigError(f"--param {item!r}: {cid}.{name} must be {rng}")
        out.setdefault(cid, {})[name] = int(num) if num.is_integer() else num
    return out


def _substitute(sql: str, params: dict[str, float], where: str) -> str:
    """`sql` with ${name} replaced by numeric literals (only numbers ever
    reach the SQL, so no quoting issue)."""
    def sub(m):
        name = m.group(1)
        if name not in params:
            raise KeyError(f"{where} uses ${{{name}}} but the catalog has no such parameter")
        return repr(params[name])
    return _PARAM_RE.sub(sub, sql)


def render_sql(check: Check, params: dict[str, float]) -> str:
    return _substitute(check.sql(), params, f"{check.id}.sql")


def prelude_sql(checks: Optional[Iterable[Check]] = None) -> str:
    """The shared tables and macros the checks read; with `checks`, only the statements they need
    (prelude_needs): on a trace set whose heavy checks came from the index, the chunks' engines
    then skip the GPU timeline sweeps no remaining check reads."""
    with open(os.path.join(SQL_DIR, "_prelude.sql"), encoding="utf-8") as f:
        text = _substitute(f.read(), {"window_cap": WINDOW_CAP}, "_prelude.sql")
    if checks is None:
        return text
    keep = prelude_needs([c.sql() for c in checks], text)
    return "".join(body + ";\n" for name, body in _prelude_statements(text) if name in keep)


_DEFINES = re.compile(r"^\s*create\s+or\s+replace\s+perfetto\s+(?:table|view|macro|function)\s+(\w+)", re.I)


def _prelude_statements(text: str) -> list[tuple[str, str]]:
    """(name defined, statement) for each statement of the prelude, comments left out. Each one is a
    `create or replace perfetto table|macro NAME`; a semicolon appears in comments only (a test holds
    the prelude to that)."""
    code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    out = []
    for body in (b.strip() for b in code.split(";")):
        if not body:
            continue
        m = _DEFINES.match(body)
        if m is None:
            raise ValueError(f"_prelude.sql: a statement that defines nothing: {body[:60]!r}")
        out.append((m.group(1), body))
    return out


def prelude_needs(sqls: Iterable[str], text: Optional[str] = None) -> set[str]:
    """The prelude names the given SQL reads, directly or through other prelude statements."""
    stmts = _prelude_statements(text if text is not None else prelude_sql())
    names = {name for name, _ in stmts}
    word = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    uses = {name: set(word.findall(_DEFINES.sub("", body, count=1))) - {name} for name, body in stmts}
    todo = {n for sql in sqls for n in word.findall(sql)}
    need: set[str] = set()
    while todo:
        n = todo.pop()
        if n not in need:
            need.add(n)
            todo |= uses[n]
    return need


def detect_families(tp) -> dict[str, bool]:
    row = tp.query(FAMILY_SQL).as_dicts()[0]
    return {k: bool(v) for k, v in row.items()}


def _to_finding(row: dict) -> Finding:
    sev = row.get("severity") or "info"
    ev = {k: v for k, v in row.items() if k not in _CORE_COLUMNS and v is not None}
    return Finding(sev, row.get("finding") or "", row.get("ts"), row.get("dur"), row.get("hint"), ev)


def _status(findings: list[Finding]) -> str:
    """The worst severity, except that 'info' rows next to an 'ok' verdict are
    details of it (e.g. a start-up line beside a healthy steady state)."""
    sevs = {f.severity for f in findings}
    for s in ("error", "warning", "ok", "info", "n/a"):
        if s in sevs:
            return s
    return "ok"


def not_recorded(check: Check, params: dict[str, float]) -> CheckResult:
    """The result of a check none of whose data is in the trace."""
    missing = " or ".join(FAMILY_HELP[f] for f in check.families)
    return CheckResult(check, "not recorded", [], params, note=f"no {missing} in this trace")


def run_check(tp, check: Check, families: dict[str, bool], params: dict[str, float]) -> CheckResult:
    if not any(families.get(f) for f in check.families):
        return not_recorded(check, params)
    t0 = time.perf_counter()
    sql = render_sql(check, params)
    try:
        rows = _run_sql(tp, sql)
    except TraceProcessorError as e:
        return CheckResult(check, "failed", [], params, time.perf_counter() - t0, error=str(e))
    except sqlite3.Error as e:
        return CheckResult(check, "failed", [], params, time.perf_counter() - t0, error=f"reducing: {e}")
    findings = by_severity([_to_finding(r) for r in rows])
    return CheckResult(check, _status(findings), findings, params, time.perf_counter() - t0)


def by_severity(findings: list) -> list:
    """Worst first; the order given (the SQL's) inside one severity."""
    return sorted(findings, key=lambda f: STATUS_ORDER.index(f.severity) if f.severity in STATUS_ORDER else 99)


def _run_sql(tp, sql: str) -> list[dict]:
    """A check's rows. A check in map-reduce form (a `-- @reduce TABLE` line)
    runs its map part here and its reduce part in SQLite on the partial rows,
    exactly as over a trace set's chunks (traceset.py): one engine formats the
    numbers either way, so whole and split findings are the same text."""
    from .traceset import reduce_rows, split_sql

    parts = split_sql(sql)
    if parts is None:
        return tp.query(sql).as_dicts()
    map_sql, table, reduce_sql = parts
    tp.query(map_sql)
    res = tp.query(f"select * from {table}")
    return reduce_rows(reduce_sql, table, res.columns, [tuple(r) for r in res.rows])


def run_checks(tp, trace_path: str = "", only: Optional[Iterable[str]] = None,
               params: Optional[dict[str, dict[str, float]]] = None) -> Report:
    checks = select_checks(only)
    params = params or {}
    families = detect_families(tp)
    # every check (only None): the whole prelude, which callers such as `timeline diff` read after;
    # a selection: the statements its checks need
    prelude = prelude_sql(None if only is None else [c for c in checks if any(families.get(f) for f in c.families)])
    if prelude:
        tp.query(prelude)
    bounds = tp.query("select start_ts, end_ts from trace_bounds").rows
    start, end = bounds[0] if bounds else (None, None)
    results = [run_check(tp, c, families, {**c.defaults(), **params.get(c.id, {})}) for c in checks]
    incomplete = completeness_problem(tp, trace_path or None)
    for r in results:
        if incomplete and r.check.id == "dropped_events" and r.status in ("ok", "info", "n/a", "not recorded"):
            # what came after the cut is unknown: never "no events lost"
            r.findings.insert(0, Finding("warning", incomplete))
            r.status = "warning"
        elif incomplete and r.status == "not recorded":
            r.note = f"{r.note} (but the trace is not complete: it may have been cut off)"
    return Report(trace_path, getattr(tp, "engine_name", "?"), start, end, families, results, incomplete)


def ran_out_of_memory(tp) -> bool:
    """The wasm32 engine crashed for want of memory (a memory64 one may not)."""
    return bool(getattr(tp, "out_of_memory", False)) and getattr(tp, "memory64", True) is False


def check_trace(load, trace_path: str = "", only: Optional[Iterable[str]] = None,
                params: Optional[dict[str, dict[str, float]]] = None) -> Report:
    """run_checks on the engine `load(None)` returns; when that is the wasm32
    engine and it runs out of memory in them, once more (saying so on stderr)
    on the memory64 engine `load(True)` returns. The engines are closed here."""
    from ..trace_processor.wasm_engine import say

    tp = load(None)
    try:
        try:
            report = run_checks(tp, trace_path, only, params)
        except TraceProcessorError:
            if not ran_out_of_memory(tp):
                raise
            report = None
        if report is not None and not ran_out_of_memory(tp):
            return report
    finally:
        tp.close()
    say(f"{os.path.basename(trace_path)}: the wasm32 engine ran out of memory in the checks; running them "
        "again on the memory64 engine (slower; the native engine, --engine native, is faster)")
    tp = load(True)
    try:
        return run_checks(tp, trace_path, only, params)
    finally:
        tp.close()
