"""The diff of two runs as data: rows (one measured thing each, with both
sides, the change, its interval and significance, and its estimated impact
on step time), the checks' changes and what only one trace has.  Rendering
is apart (render.py); `to_json()` is the `--format json` document and what
other front ends (timeline mcp) hand on."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

SECTIONS = {
    "step": "step time",
    "state": "main thread",
    "call": "CUDA call",
    "kernel": "GPU kernel",
    "memcpy": "copies",
    "launch": "launch to start",
    "python": "Python",
}


@dataclass
class Row:
    section: str                  # a SECTIONS key
    name: str                     # what: 'p50', 'sleeping', 'cudaMemcpy', a kernel, 'H2D', a function
    metric: str                   # which number: 'step', 'ms per step', 'calls per step', 'median', 'share'...
    unit: str                     # 'ns', 'count', 'bytes', 'fraction'
    baseline: Optional[float]
    candidate: Optional[float]
    change: Optional[float]       # candidate - baseline (the statistic's difference)
    ci: Optional[tuple[float, float]] = None  # interval on `change`; None: not testable (too few samples)
    significant: Optional[bool] = None        # None: not testable
    impact_ns: float = 0.0        # estimated change of the step time (ns per step) it accounts for
    share_baseline: Optional[float] = None    # state rows: share of the step
    share_candidate: Optional[float] = None
    without_stack: Optional[str] = None       # python rows of samples without a stack: why (python_buckets)

    @property
    def relative(self) -> Optional[float]:
        if self.baseline in (None, 0) or self.change is None or math.isnan(self.change):
            return None
        return self.change / abs(self.baseline)

    def to_json(self) -> dict:
        def num(v):
            return None if v is None or (isinstance(v, float) and math.isnan(v)) else round(float(v), 6)

        return {
            "section": self.section, "name": self.name, "metric": self.metric, "unit": self.unit,
            "baseline": num(self.baseline), "candidate": num(self.candidate), "change": num(self.change),
            "relative_change": num(self.relative),
            "interval": [num(self.ci[0]), num(self.ci[1])] if self.ci else None,
            "significant": self.significant, "impact_ns_per_step": num(self.impact_ns),
            **({"share_baseline": num(self.share_baseline), "share_candidate": num(self.share_candidate)}
               if self.share_baseline is not None or self.share_candidate is not None else {}),
            **({"without_stack": self.without_stack} if self.without_stack else {}),
        }


@dataclass
class CheckChange:
    check: str
    title: str
    change: str                   # 'appeared' | 'vanished' | 'changed'
    baseline: str                 # the check's status in each trace
    candidate: str
    finding: str                  # the worse side's main finding

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class RankDiff:
    key: str                      # 'rank 3', or the file name when the traces do not say their rank
    baseline: str                 # the two traces
    candidate: str
    report: "DiffReport"

    def to_json(self) -> dict:
        return {"rank": self.key, "baseline_trace": self.baseline, "candidate_trace": self.candidate,
                **self.report.to_json()}


@dataclass
class RankSet:
    """Two directories of per-rank traces: each rank both have, compared."""
    matched_by: str               # 'rank' (the traces' rank=N) or 'file name'
    compared: list[RankDiff]
    only_baseline: list[str]      # ranks one side lacks
    only_candidate: list[str]

    def to_json(self) -> dict:
        return {"matched_by": self.matched_by, "compared": [r.to_json() for r in self.compared],
                "only_in_baseline": self.only_baseline, "only_in_candidate": self.only_candidate}


@dataclass
class DiffReport:
    baseline: dict                # profile context: trace, command, machine, steps...
    candidate: dict
    rows: list[Row]               # step rows first, then by significance and |impact|
    checks: list[CheckChange] = field(default_factory=list)
    only_baseline: list[str] = field(default_factory=list)   # data only one trace has
    only_candidate: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    ranks: Optional[RankSet] = None   # rank directories: the per-rank diffs (the rows pool all ranks)
    # Python samples taken without a stack (python_buckets): in the functions' shares, but no function
    without_stack: list[Row] = field(default_factory=list)

    def step_row(self, name: str = "p50") -> Optional[Row]:
        return next((r for r in self.rows if r.section == "step" and r.name == name), None)

    def step_regression(self) -> Optional[float]:
        """Relative change of the median step time (0.1: 10 % slower), None when unknown."""
        row = self.step_row()
        return row.relative if row else None

    def significant_rows(self) -> list[Row]:
        return [r for r in self.rows if r.significant]

    def to_json(self) -> dict:
        return {
            "baseline": self.baseline, "candidate": self.candidate,
            "step_time_change": self.step_regression(),
            "rows": [r.to_json() for r in self.rows],
            "checks": [c.to_json() for c in self.checks],
            "only_in_baseline": self.only_baseline, "only_in_candidate": self.only_candidate,
            "python_without_stack": [r.to_json() for r in self.without_stack],
            "notes": self.notes, "settings": self.settings,
            **({"ranks": self.ranks.to_json()} if self.ranks else {}),
        }
