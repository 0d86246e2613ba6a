"""alloc_churn (sql/alloc_churn.sql) as a partial computed at conversion.

The tables its last statement reads are worked out here over the whole recording (_cuda.py, as batches
come): per process _tl_ac (its CUDA span, malloc and free counts, time inside them, malloc p50/p99 by
the prelude's _tl_percentiles: the malloc durations are the only rows held), _tl_ac_oom (out-of-memory
returns: how many, first and last, the first's size and function), _tl_ac_mem (cuda.allocated_bytes:
peak, value at the first OOM) and _tl_pname. The set part holds them; at merge the check's own last
statement runs on them in SQLite with the parameters asked for (its formatting is SQLite's). Chunk parts
are empty.

No partial (the SQL runs) where no CUDA call was seen, where trace_processor might give a malloc/free/OOM
call another duration than the one written or a process' last CUDA call another end (_sched.py's spans),
where two OOM returns of a process tie for its first or two counter samples for the value at it, where a
process' leader thread is not known by name, beyond _cuda.MAX_HELD held calls or MAX_SAMPLES samples
(with an OOM).
"""
from __future__ import annotations

import sqlite3

import numpy as np

from ._cuda import COLUMNS, CudaCalls, at_or_before, nested, spans_as_written
from ._gpu import nearest_rank
from ._sched import SchedColumns

CHECK = "alloc_churn"
VERSION = 1
Collector = (CudaCalls, SchedColumns)


def part(collectors, starts) -> dict | None:
    calls, sched = collectors
    if calls.declined or not calls.seen or calls.model is None or not nested(sched, calls.ac_rows):
        return None
    if calls.ac and not spans_as_written(sched, calls.thread_span):
        return None  # (the CUDA span is printed only beside allocations: without any, no span to get right)
    ac = []
    for p, (mallocs, frees, inside) in sorted(calls.ac.items()):
        lo, hi = calls.span[p]
        d = np.sort(np.concatenate(calls.malloc_durs[p])) if p in calls.malloc_durs else None
        ac.append([p, lo, hi - lo, mallocs, frees, inside, None if d is None else nearest_rank(d, 0.50),
                   None if d is None else nearest_rank(d, 0.99)])
    oom = []
    for p, (n, first, last, size, fn, tie) in sorted(calls.oom.items()):
        if tie:
            return None  # the SQL's `order by ts limit 1` picks by row order
        oom.append([p, n, first, last - first, size, fn])
    mem = []
    for p, peak in sorted(calls.peak.items()):
        at = None
        if p in calls.oom:
            if p not in calls.mem:
                return None  # samples dropped (MAX_SAMPLES)
            at = at_or_before(calls.mem[p], calls.oom[p][1])
            if at is False:
                return None
        mem.append([p, peak, at])
    names = {p: calls.process_name(p) for p in set(calls.ac) | set(calls.oom)}
    if None in names.values():
        return None
    pname = [[p, p, n] for p, n in sorted(names.items())]
    return {"set": {"version": VERSION, "tables": {"_tl_ac": ac, "_tl_ac_oom": oom, "_tl_ac_mem": mem,
                                                   "_tl_pname": pname}},
            "chunks": [{} for _ in range(len(starts))]}


def merge(set_part: dict, chunk_parts: list, params: dict):
    if not isinstance(set_part, dict) or set_part.get("version") != VERSION or any(c is None for c in chunk_parts):
        return None
    from ..catalog import BY_ID
    from ..runner import render_sql
    from ..traceset import _statements
    last = _statements(render_sql(BY_ID[CHECK], params))[-1]
    db = sqlite3.connect(":memory:")
    try:
        for table, cols in COLUMNS[CHECK].items():
            db.execute(f"create table {table} ({', '.join(cols)})")
            db.executemany(f"insert into {table} values ({', '.join('?' * len(cols))})",
                           [tuple(r) for r in set_part["tables"][table]])
        cur = db.execute(last)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        db.close()
