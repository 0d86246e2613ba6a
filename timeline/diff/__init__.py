"""`timeline diff`: what changed between two runs (docs: README, "Comparing runs").

    from timeline.diff import compare
    report = compare("yesterday.pftrace", "today.pftrace")
    report.to_json()                      # the --format json document
    report.step_regression()              # 0.12: the median step is 12 % slower

profile.py reads a trace into samples, compare.py judges the differences
(stats.py), report.py holds the result, render.py prints it; sets.py merges
a trace set's chunks into one profile and compares rank directories.
"""
from .compare import compare, compare_profiles
from .report import CheckChange, DiffReport, RankDiff, RankSet, Row
from .sets import merge_profiles

__all__ = ["compare", "compare_profiles", "merge_profiles", "DiffReport", "Row", "CheckChange", "RankDiff",
           "RankSet"]
