"""cuda_errors (sql/cuda_errors.sql) as a partial computed at conversion.

The SQL is in map-reduce form: its map table _tl_ce_part (per category, ret, fn and thread the failed
calls: how many, the first start, the last end; one 'all' row counting the return codes) is worked out
here over the whole recording (_cuda.py), held in the set part, and the check's own reduce SQL runs on
it in SQLite at merge. Chunk parts are empty.

No partial (the SQL runs) where no CUDA call was seen, where a failed call's thread is not known to
the converter by name, where trace_processor might give a failed call another duration than the one
written (a thread slice crossing it: _sched.py's spans), beyond _cuda.MAX_HELD failed calls, or for
other parameters than the defaults.
"""
from __future__ import annotations

from ..catalog import BY_ID
from ._cuda import CudaCalls, nested, reduce
from ._gpu import made_with
from ._sched import SchedColumns

CHECK = "cuda_errors"
VERSION = 1
Collector = (CudaCalls, SchedColumns)


def part(collectors, starts) -> dict | None:
    calls, sched = collectors
    if calls.declined or not calls.seen or calls.model is None or not nested(sched, calls.err_rows):
        return None
    strings = calls.s.strings
    rows = []
    for (cat, ret, fn, tid), (n, first, last) in sorted(calls.err.items()):
        name = calls.thread_name(tid)
        if name is None:
            return None  # trace_processor's name would come from elsewhere, or be NULL
        rows.append(["err", strings[cat], ret, strings[fn], tid, name, n, first, last, None, None])
    rows.append(["all", None, None, None, None, None, None, None, None, calls.with_ret, calls.nonzero])
    return {"set": {"version": VERSION, "params": BY_ID[CHECK].defaults(), "rows": rows},
            "chunks": [{} for _ in range(len(starts))]}


def merge(set_part: dict, chunk_parts: list, params: dict):
    if not made_with(set_part, VERSION, params) or any(c is None for c in chunk_parts):
        return None
    return reduce(CHECK, params, set_part["rows"])
