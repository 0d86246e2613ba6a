"""`timeline check DIR_OR_GLOB`: the checks on many traces at once, in a
process pool (one trace_processor per worker, as Perfetto's
BatchTraceProcessor does), then a per-trace table and a fleet summary."""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

SEVERITY_ORDER = ("error", "warning", "info", "ok")


def _one(args) -> dict:
    """Worker: checks on one trace -> its JSON report, or {"trace", "error"}."""
    path, engine, tp_bin, ids, params = args
    from ..trace_processor import TraceProcessorError, open_trace
    from .report import to_json
    from .runner import run_checks

    from ..trace_file import check_trace_file
    from ..errors import UserError

    try:
        check_trace_file(path)  # empty, a raw log, a cut gzip: said as for one trace
    except UserError as e:
        return {"trace": path, "error": str(e)}
    try:
        tp = open_trace(path, engine=engine, bin_path=tp_bin)
    except Exception as e:  # noqa: BLE001 - one bad trace must not stop the fleet
        return {"trace": path, "error": f"cannot load: {str(e).splitlines()[0] if str(e) else type(e).__name__}"}
    try:
        return to_json(run_checks(tp, path, only=ids, params=params))
    except TraceProcessorError as e:
        return {"trace": path, "error": f"checks failed: {str(e).splitlines()[0]}"}
    finally:
        tp.close()


def run_fleet(paths: list[str], engine: str, tp_bin, ids, params, workers: int | None = None) -> list[dict]:
    workers = max(1, min(len(paths), workers or os.cpu_count() or 1))
    jobs = [(p, engine, tp_bin, ids, params) for p in paths]
    if workers == 1:
        return [_one(j) for j in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_one, jobs))


def headline(rep: dict) -> str:
    """The worst finding of a report, in a few words."""
    for sev in ("error", "warning"):
        for c in rep.get("checks", []):
            for f in c["findings"]:
                if f["severity"] == sev:
                    return f"{c['id']}: {f['finding'][:90]}"
    return ""


def fleet_summary(reports: list[dict]) -> dict:
    """Per check: how many traces have an error / a warning from it."""
    out: dict[str, dict[str, int]] = {}
    for rep in reports:
        for c in rep.get("checks", []):
            sevs = {f["severity"] for f in c["findings"]}
            for sev in ("error", "warning"):
                if sev in sevs:
                    out.setdefault(c["id"], {"error": 0, "warning": 0})[sev] += 1
                    break
    return {"traces": len(reports), "unreadable": sum(1 for r in reports if "error" in r and "checks" not in r),
            "by_check": dict(sorted(out.items(), key=lambda kv: (-kv[1]["error"], -kv[1]["warning"], kv[0])))}
