"""Two profiles (profile.py) into a DiffReport: rows on what both traces
have, each with its change, bootstrap interval and impact on step time."""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from ..python_buckets import WITHOUT_STACK
from ..terminal import printable
from . import stats
from .profile import STATES, Calls, Profile, Steps
from .report import CheckChange, DiffReport, Row

MIN_CHANGE = 0.05   # a change smaller than this (relative) is never significant
MIN_IMPACT = 0.05   # nor one that moves the step time by less than this (a fraction of the baseline's p50)
MAX_NAMES = 200     # per section: the rest (smallest by time in both runs) are left out
_SEVERITY = ("ok", "info", "warning", "error")


class _Judge:
    """Significance with the floors: statistically real, relatively large and large for the step."""

    def __init__(self, step_ns: float, min_change: float, min_impact: float, confidence: float, seed: int):
        self.step_ns, self.min_change, self.min_impact = step_ns, min_change, min_impact
        self.confidence, self.seed = confidence, seed

    def row(self, section, name, metric, unit, a, b, stat, impact_per_unit: Optional[float] = 1.0,
            scale: float = 1.0) -> Row:
        """A row comparing samples a and b by `stat`; impact = change x impact_per_unit (None: no impact
        on step time, the relative floor alone)."""
        a = np.asarray(a, dtype=np.float64) * scale
        b = np.asarray(b, dtype=np.float64) * scale
        base = float(stat(a)) if len(a) else None
        cand = float(stat(b)) if len(b) else None
        iv = stats.bootstrap_diff(a, b, stat, self.confidence, self.seed)
        return self._judged(Row(section, name, metric, unit, base, cand, iv.diff), iv, impact_per_unit)

    def _judged(self, row: Row, iv: stats.Interval, impact_per_unit: Optional[float]) -> Row:
        row.impact_ns = 0.0 if impact_per_unit is None or np.isnan(iv.diff) else iv.diff * impact_per_unit
        if iv.lo is None:
            return row
        row.ci = (iv.lo, iv.hi)
        rel_ok = abs(iv.diff) >= self.min_change * abs(row.baseline) if row.baseline else abs(iv.diff) > 0
        impact_ok = impact_per_unit is None or abs(row.impact_ns) >= self.min_impact * self.step_ns
        row.significant = bool(iv.excludes_zero and rel_ok and impact_ok)
        return row


def _mean(x, axis=None):
    return np.mean(x, axis=axis)


def _median(x, axis=None):
    return np.median(x, axis=axis)


def _p90(x, axis=None):
    return np.percentile(x, 90, axis=axis)


def _top_names(a: dict, b: dict, weight_a: dict, weight_b: dict) -> list[str]:
    names = set(a) | set(b)
    total = {n: float(np.sum(weight_a.get(n, 0))) + float(np.sum(weight_b.get(n, 0))) for n in names}
    return sorted(names, key=lambda n: -total[n])[:MAX_NAMES]


def _call_rows(j: _Judge, section: str, a: Calls, b: Calls, steps_a: int, steps_b: int) -> list[Row]:
    """Per name: calls per step, time per step (impact), median duration."""
    rows = []
    for name in _top_names(a.durs, b.durs, a.time, b.time):
        ca = a.count.get(name, np.zeros(steps_a))
        cb = b.count.get(name, np.zeros(steps_b))
        da, db = a.durs.get(name, np.zeros(0)), b.durs.get(name, np.zeros(0))
        med = float(np.median(np.concatenate([da, db]))) if len(da) + len(db) else 0.0
        rows.append(j.row(section, name, "time per step", "ns", a.time.get(name, np.zeros(steps_a)),
                          b.time.get(name, np.zeros(steps_b)), _mean))
        rows.append(j.row(section, name, "calls per step", "count", ca, cb, _mean, impact_per_unit=med))
        if len(da) and len(db):
            per_step = float(np.mean(cb)) if len(cb) else 0.0
            rows.append(j.row(section, name, "median", "ns", da, db, _median, impact_per_unit=per_step))
    return rows


def _python_rows(j: _Judge, a: Profile, b: Profile, ns_per_share: float) -> tuple[list[Row], list[Row]]:
    """Per function its share of the weight; impact: the change of share x ns_per_share.
    The samples taken without a stack (python_buckets) count in the shares, but are
    no function: their rows come apart (second list), each saying why."""
    na, nb = sum(a.python.values()), sum(b.python.values())

    def judged(name: str) -> Row:
        ka, kb = a.python.get(name, 0), b.python.get(name, 0)
        if a.python_source == "samples":
            iv = stats.proportion_diff(ka, na, kb, nb, j.confidence)
        else:  # weights are ns, not counts: no sampling model, no interval
            iv = stats.Interval((kb / nb if nb else 0) - (ka / na if na else 0), None, None)
        row = Row("python", name, "share", "fraction", ka / na if na else None, kb / nb if nb else None, iv.diff)
        return j._judged(row, iv, ns_per_share)

    names = set(a.python) | set(b.python)
    buckets = [judged(name) for name in WITHOUT_STACK if name in names]  # a bucket's frame is its bare name
    for row in buckets:
        row.without_stack = WITHOUT_STACK[row.name]
    functions = sorted(names - set(WITHOUT_STACK), key=lambda n: -(a.python.get(n, 0) / max(na, 1)
                                                                   + b.python.get(n, 0) / max(nb, 1)))
    return [judged(name) for name in functions[:MAX_NAMES]], buckets


def _severity(result) -> str:
    return result.status if result.status in _SEVERITY else "ok"


def _check_changes(a, b) -> list[CheckChange]:
    """Per check run on both: the status moved between ok/info and
    warning/error, or between warning and error."""
    out = []
    by_id = {r.check.id: r for r in b.results}
    for ra in a.results:
        rb = by_id.get(ra.check.id)
        if rb is None or "not recorded" in (ra.status, rb.status) or "failed" in (ra.status, rb.status):
            continue
        sa, sb = _SEVERITY.index(_severity(ra)), _SEVERITY.index(_severity(rb))
        bad_a, bad_b = sa >= 2, sb >= 2
        if bad_a == bad_b and (not bad_a or sa == sb):
            continue
        change = "appeared" if bad_b and not bad_a else "vanished" if bad_a and not bad_b else "changed"
        worse = rb if sb >= sa else ra
        head = next((f.message for f in worse.findings if f.severity in ("error", "warning")), "")
        out.append(CheckChange(ra.check.id, ra.check.title, change, ra.status, rb.status, head))
    order = {"appeared": 0, "changed": 1, "vanished": 2}
    return sorted(out, key=lambda c: order[c.change])


def compare_profiles(a: Profile, b: Profile, min_change: float = MIN_CHANGE, min_impact: float = MIN_IMPACT,
                     confidence: float = stats.CONFIDENCE, seed: int = stats.SEED) -> DiffReport:
    notes = []
    both_steps = a.have.get("steps") and b.have.get("steps")
    if not both_steps:
        notes.append("steps: " + ("neither trace marks steps" if not (a.have.get("steps") or b.have.get("steps"))
                                  else "only one trace marks steps") +
                     " (NVTX ranges or periodic syncs on the main thread): each run's steady state is one "
                     "step, compared per second of it, with no interval")
    elif (a.steps.source, a.steps.label) != (b.steps.source, b.steps.label):
        notes.append(f"steps are cut differently: {a.steps.source} '{a.steps.label}' in the baseline, "
                     f"{b.steps.source} '{b.steps.label}' in the candidate")
    # Without steps on both sides every per-step value becomes per second of the steady state.
    scale_a = 1.0 if both_steps else 1e9 / max(float(a.steps.durations.sum()), 1.0)
    scale_b = 1.0 if both_steps else 1e9 / max(float(b.steps.durations.sum()), 1.0)
    if not both_steps:
        a, b = _per_second(a, scale_a), _per_second(b, scale_b)
    da, db = a.steps.durations.astype(np.float64), b.steps.durations.astype(np.float64)
    step_ns = float(np.median(da)) if len(da) else 0.0
    j = _Judge(step_ns if both_steps else 1e9, min_change, min_impact, confidence, seed)
    rows: list[Row] = []
    if both_steps:
        rows.append(j.row("step", "p50", "step time", "ns", da, db, _median, impact_per_unit=None))
        rows.append(j.row("step", "p90", "step time", "ns", da, db, _p90, impact_per_unit=None))
    else:
        rows.append(Row("step", "run", "steady state", "ns", float(da.sum()), float(db.sum()),
                        float(db.sum() - da.sum())))
    body: list[Row] = []
    without_stack: list[Row] = []
    if a.have.get("main thread") and b.have.get("main thread"):
        # per step: a share of the step; per second: of the second
        mean_a, mean_b = (float(np.mean(da)) or 1.0, float(np.mean(db)) or 1.0) if both_steps else (1e9, 1e9)
        for state in STATES:
            sa, sb = a.states.get(state, np.zeros(len(da))), b.states.get(state, np.zeros(len(db)))
            row = j.row("state", state, "time per step", "ns", sa, sb, _mean)
            row.share_baseline, row.share_candidate = float(np.mean(sa)) / mean_a, float(np.mean(sb)) / mean_b
            body.append(row)
    if a.have.get("CUDA calls") and b.have.get("CUDA calls"):
        body += _call_rows(j, "call", a.apis, b.apis, len(da), len(db))
        for kind in sorted(set(a.memcpy) | set(b.memcpy)):
            body.append(j.row("memcpy", kind, "bytes per step", "bytes", a.memcpy.get(kind, np.zeros(len(da))),
                              b.memcpy.get(kind, np.zeros(len(db))), _mean, impact_per_unit=None))
    if a.have.get("GPU activity") and b.have.get("GPU activity"):
        body += _call_rows(j, "kernel", a.kernels, b.kernels, len(da), len(db))
        if len(a.launch_delay) and len(b.launch_delay):
            per_step = float(np.mean([len(b.launch_delay) / max(len(db), 1)]))
            body.append(j.row("launch", "launch to kernel start", "median", "ns", a.launch_delay, b.launch_delay,
                              _median, impact_per_unit=min(per_step, 1.0)))
    if a.have.get("Python stacks") and b.have.get("Python stacks") and a.python_source == b.python_source:
        # a share of the main thread's CPU samples is a share of its running time
        running = a.states.get("running")
        per_share = float(np.mean(running)) if a.python_source == "samples" and running is not None else step_ns
        functions, without_stack = _python_rows(j, a, b, per_share)
        body += functions
    # Unchanged, untested rows of things both runs lack (a state never entered) say nothing.
    body = [r for r in body if (r.baseline or r.candidate)]
    if not both_steps:
        for r in body:
            r.metric = r.metric.replace("per step", "per s")
    body.sort(key=lambda r: (not r.significant, -abs(r.impact_ns), -abs(r.relative or 0)))
    only_a = [k for k, v in a.have.items() if v and not b.have.get(k)]
    only_b = [k for k, v in b.have.items() if v and not a.have.get(k)]
    if a.python_source and b.python_source and a.python_source != b.python_source:
        notes.append("Python functions not compared: CPU samples in one trace, stacks at calls in the other")
    changes = _check_changes(a.checks, b.checks) if a.checks is not None and b.checks is not None else []
    return DiffReport(a.context, b.context, rows + body, changes, only_a, only_b, notes,
                      {"min_change": min_change, "min_impact": min_impact, "confidence": confidence,
                       "seed": seed, "per": "step" if both_steps else "second of steady state"},
                      without_stack=without_stack)


def _per_second(p: Profile, scale: float) -> Profile:
    """The profile as one step (its steps, or its steady state, summed) whose
    values are rates per second of it; call durations stay as they are."""
    import copy

    def rate(d: dict) -> dict:
        return {k: np.asarray([float(np.sum(v)) * scale]) for k, v in d.items()}

    q = copy.copy(p)
    q.steps = Steps(p.steps.source, p.steps.label, p.steps.starts[:1], p.steps.starts[:1] +
                    int(p.steps.durations.sum()))
    q.states = rate(p.states)
    q.apis = Calls(p.apis.durs, rate(p.apis.count), rate(p.apis.time))
    q.kernels = Calls(p.kernels.durs, rate(p.kernels.count), rate(p.kernels.time))
    q.memcpy = rate(p.memcpy)
    return q


def _first_line(e: Exception) -> str:
    return next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)


def _load(path: str, tp_config, user):
    """The trace loaded, opened once as `user` through trace_file; one-line UserErrors."""
    from ..errors import UserError
    from ..trace_file import open_loadable
    from ..trace_processor import TraceProcessorError

    if not os.path.lexists(path):
        raise UserError(f"{printable(path)} does not exist")
    fd = open_loadable(path, user)
    try:
        return tp_config.load(path, fd=fd)
    except TraceProcessorError as e:
        raise UserError(f"{printable(path)}: {_first_line(e)}") from None
    finally:
        os.close(fd)


def compare(baseline_path: str, candidate_path: str, *, tp_config=None, user=None, checks: bool = True,
            check_params=None, min_change: float = MIN_CHANGE, min_impact: float = MIN_IMPACT,
            confidence: float = stats.CONFIDENCE, seed: int = stats.SEED, progress=None) -> DiffReport:
    """Diffs two traces (paths): each opened as `user` (identity.InvokingUser;
    None: the invoking user) through trace_file, loaded by `tp_config`
    (TraceProcessorConfig; None: the default engine), profiled, compared.
    Either side may be a trace set (its chunks' profiles merged, sets.py);
    two directories of per-rank traces are compared rank by rank and pooled
    (the report's `ranks`). Bad inputs raise errors.UserError (one line).
    `progress(message)` is told what is being done."""
    from ..errors import UserError
    from ..identity import invoking_user
    from ..trace_processor import TraceProcessorConfig, TraceProcessorError
    from . import sets
    from .profile import profile

    if not 0 < confidence < 1:
        raise UserError(f"confidence must be between 0 and 1, not {confidence}")
    if min_change < 0 or min_impact < 0:
        raise UserError("min_change and min_impact must be >= 0")
    tp_config = tp_config or TraceProcessorConfig()
    user = user or invoking_user()
    judge = {"min_change": min_change, "min_impact": min_impact, "confidence": confidence, "seed": seed}
    kinds = (sets.input_kind(baseline_path), sets.input_kind(candidate_path))
    if "ranks" in kinds:
        if kinds != ("ranks", "ranks"):
            d, other = (baseline_path, candidate_path) if kinds[0] == "ranks" else (candidate_path, baseline_path)
            raise UserError(f"{printable(d)} is a directory of traces (ranks) and {printable(other)} is not: "
                            "give a directory of per-rank traces on both sides")
        return sets.compare_rank_dirs(baseline_path, candidate_path, tp_config, user, checks, check_params,
                                      progress, **judge)
    profiles, notes = [], []
    for role, path, kind in (("baseline", baseline_path, kinds[0]), ("candidate", candidate_path, kinds[1])):
        if kind == "set":
            prof, said = sets.profile_set(path, tp_config, user, checks, check_params, role, progress)
            profiles.append(prof)
            notes += said
            continue
        if progress:
            progress(f"reading the {role}, {os.path.basename(path)}")
        tp = _load(path, tp_config, user)
        try:
            profiles.append(profile(tp, path, run_checks=checks, check_params=check_params))
        except TraceProcessorError as e:
            raise UserError(f"{role} {printable(path)}: cannot read it: {_first_line(e)}") from None
        finally:
            tp.close()
    report = compare_profiles(*profiles, **judge)
    report.notes += notes
    return report
