"""Whether a trace loaded by trace_processor is whole.

timeline's Perfetto writer puts a `timeline_version` entry at the start and a
`timeline_trace_complete` entry (with counts) as the very last packet (both in
the metadata table: cr-<key> for the first bundle of such entries, cr-<n>-<key>
for later ones). A trace with the first and not the last was
cut short: a full disk, a copy interrupted, a conversion killed. Chrome JSON
traces and traces older than these markers cannot be judged (None).
"""
from __future__ import annotations

from typing import Optional

SQL = """
select
  exists(select 1 from metadata where name glob 'cr-*timeline_version') as ours,
  (select max(int_value) from metadata where name glob 'cr-*timeline_trace_complete') as complete,
  (select max(int_value) from metadata where name glob 'cr-*timeline_switches') as switches,
  (select count(*) from sched)
    + coalesce((select sum(value) from stats where name = 'compact_sched_switch_skipped'), 0) as loaded
"""


def completeness_problem(tp) -> Optional[str]:
    """One sentence when the trace is not whole (or loads less than it says it holds), else None."""
    row = tp.query(SQL).as_dicts()[0]
    if not row["ours"]:
        return None
    if not row["complete"]:
        return ("the trace is not complete: its last packet is missing (cut short: disk full, an interrupted "
                "copy or conversion?); everything after the cut, drops included, is unknown")
    if row["switches"] is not None and row["loaded"] < row["switches"]:
        return (f"the trace says it holds {row['switches']:,} context switches but {row['loaded']:,} loaded: "
                "part of it is damaged")
    return None
