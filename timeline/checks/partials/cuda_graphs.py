"""cuda_graphs (sql/cuda_graphs.sql) as a partial computed at conversion.

The SQL is in map-reduce form: its map table _tl_cg_part (per process its captures, instantiations,
launches, set-up time and first/last instantiation; per process and graph exec handle the
instantiations and launches) is worked out here over the whole recording (_cuda.py: counts as batches
come), held in the set part, and the check's own reduce SQL runs on it in SQLite at merge (so the
parameters apply there: any min_instantiations and min_replays). Chunk parts are empty.

No partial (the SQL runs) where no CUDA call was seen, where a process' leader thread is not known to
the converter by name, where trace_processor might give a set-up call another duration than the one
written (_sched.py's spans), beyond _cuda.MAX_HELD held calls or MAX_EXECS handles.
"""
from __future__ import annotations

from ._cuda import CudaCalls, nested, reduce
from ._sched import SchedColumns

CHECK = "cuda_graphs"
VERSION = 1
Collector = (CudaCalls, SchedColumns)


def part(collectors, starts) -> dict | None:
    calls, sched = collectors
    if calls.declined or not calls.seen or calls.model is None or not nested(sched, calls.setup_rows):
        return None
    names = {p: calls.process_name(p) for p in calls.graph}
    if None in names.values():
        return None  # trace_processor's name would come from elsewhere
    rows = [["proc", p, names[p], *g, None] for p, g in sorted(calls.graph.items())]
    rows += [["inst" if inst else "launch", p, names[p], None, n, None, None, None, None, ex]
             for (p, inst, ex), n in sorted(calls.execs.items(), key=str)]
    return {"set": {"version": VERSION, "rows": rows}, "chunks": [{} for _ in range(len(starts))]}


def merge(set_part: dict, chunk_parts: list, params: dict):
    if not isinstance(set_part, dict) or set_part.get("version") != VERSION or any(c is None for c in chunk_parts):
        return None
    return reduce(CHECK, params, set_part["rows"])
