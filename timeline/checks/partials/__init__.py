"""Checks computed at conversion: a check's partial over the columns the converter writes,
stored in a trace set's index, merged by `timeline check SET` without trace_processor.

A module here named after a check id (kernel_outliers.py) defines:
  Collector                    a class, fed every slice batch the converter writes (`slices`,
                               `group_slices`; `sched` blocks too where it has that method), or a
                               tuple of such classes (part then gets a tuple of instances); checks
                               naming the same class share one instance (what they read is held once);
  part(collector, starts)      -> {"set": ..., "chunks": [one dict per chunk]} or None (no partial:
                                  the check runs through trace_processor, as without this module);
  merge(set_part, chunk_parts, params) -> the check's rows (dicts, the SQL's columns), or None when
                                  the partial does not apply (other parameters than it was made with).
Modules whose name starts with "_" are shared code, not checks.
The check's SQL stays its definition: each module's test asserts partial+merge gives the SQL's findings.
"""
from __future__ import annotations

import importlib
import pkgutil

PARTIALS = "partials"  # the index key: top level (per set) and in each chunk
MAX_BYTES = 2 << 20    # a check's parts in the index, all chunks': beyond, none (the index is read up to 16 MiB)


def check_ids() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def module(check_id: str):
    """The partial module of a check, or None."""
    if check_id not in check_ids():
        return None
    return importlib.import_module(f"{__name__}.{check_id}")


def collectors() -> dict:
    """check id -> its Collector (or tuple of them), fresh, one instance per Collector class, for every
    check with a partial."""
    made: dict = {}

    def one(cls):
        if cls not in made:
            made[cls] = cls()
        return made[cls]
    out = {}
    for cid in check_ids():
        cls = module(cid).Collector
        out[cid] = tuple(one(c) for c in cls) if isinstance(cls, tuple) else one(cls)
    return out


def instances(taps: dict) -> list:
    """Each collector instance of collectors() once (a shared one is fed once)."""
    out: dict = {}
    for t in taps.values():
        for c in (t if isinstance(t, tuple) else (t,)):
            out[id(c)] = c
    return list(out.values())
