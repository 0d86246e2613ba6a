"""memory_pressure (sql/memory_pressure.sql) as a partial computed at conversion.

The SQL is in map-reduce form. The partial builds its map table (_tl_mp_part) as the SQL would on
the recording converted as ONE trace (no stall cut: no 'piece' rows), streaming as the converter
writes the memory family's slices and instants, and `merge` runs the SQL's own reduce part on those
rows in SQLite (traceset.reduce_rows), so the numbers are formatted by the SQL itself.

Held (bounded): per thread and stall kind, the count, total, longest, first start, last end and the
most major faults; the OOM kills (victim, pid, rss, killer, ts), at most MAX_OOM.
The set's part holds the rows; chunk parts are empty.

No partial (the SQL runs) where a stall's thread is unnamed for the converter, in no process it
knows, or written with another pid than its thread's; where memory slices come in a batch or on a
GPU-style group track (the converter writes none: not modelled); above MAX_OOM kills; or for other
parameters than the defaults (the parameters are used below the @reduce line only, but the partial
is checked against its SQL with them).
"""
from __future__ import annotations


from ..catalog import BY_ID
from ...converters.interface import Column
from ._gpu import made_with
from ._reduce import reduced
from .hang import _process_name

CHECK = "memory_pressure"
VERSION = 1
CAT = "memory"
STALLS = ("direct reclaim", "memcg reclaim", "compaction")
OOM, OOM_OTHER = "killed by OOM", "OOM kill: "  # the SQL's name = 'killed by OOM' or glob 'OOM kill: *'
MAX_OOM = 10_000
COLUMNS = ["kind", "tid", "thread", "pid", "process", "is_main", "what", "n", "total", "mx", "ts", "end_ts",
           "majflt", "span_id", "extra"]


class MemColumns:
    """The memory family's stalls (aggregated per thread and kind as they pass) and OOM kills."""

    def __init__(self, pid_of=None):
        self.pid_of = pid_of or (lambda tid: tid)
        self.model = None
        self.stalls: dict[tuple, list] = {}  # (tid, pid, kind) -> [n, total, longest, first ts, last end, majflt]
        self.oom: list[list] = []
        self.declined = ""

    def _oom(self, ts, name, args) -> None:
        if len(self.oom) >= MAX_OOM:
            self.declined = f"more than {MAX_OOM:,} OOM kills"
            return
        a = args or {}
        self.oom.append([int(ts), name, a.get("victim"), a.get("pid"), a.get("rss_bytes"), a.get("killer")])

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None) -> None:
        if cat != CAT or self.declined:
            return
        if name in STALLS:
            pid = pid if pid is not None else self.pid_of(tid)
            if pid is None:
                self.declined = "a stall of a thread in no known process"
                return
            majflt = (args or {}).get("major_faults")
            ts, end = int(ts), int(ts) + int(dur)
            a = self.stalls.get((int(tid), int(pid), name))
            if a is None:
                self.stalls[int(tid), int(pid), name] = [1, int(dur), int(dur), ts, end, majflt]
                return
            a[0] += 1
            a[1] += int(dur)
            a[2] = max(a[2], int(dur))
            a[3] = min(a[3], ts)
            a[4] = max(a[4], end)
            if majflt is not None:
                a[5] = majflt if a[5] is None else max(a[5], majflt)
        elif name == OOM or str(name).startswith(OOM_OTHER):
            self._oom(ts, name, args)

    def instant(self, ts, tid, pid, name, cat, args=None) -> None:
        if cat != CAT or self.declined:
            return
        if name in STALLS:
            self.declined = "a stall written as an instant"  # (a slice of dur 0 to the SQL: not modelled)
        elif name == OOM or str(name).startswith(OOM_OTHER):
            self._oom(ts, name, args)

    def async_slice(self, track, ts, dur, name, cat, args=None) -> None:
        # a stall on an async track is no thread's (the SQL's thread_track join leaves it out)
        if cat == CAT and not self.declined and (name == OOM or str(name).startswith(OOM_OTHER)):
            self._oom(ts, name, args)

    def _batch(self, cat) -> None:
        if (cat == CAT if not isinstance(cat, Column) else CAT in [str(s) for s in cat.strings]):
            self.declined = "memory slices in a batch"

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        self._batch(cat)

    def group_slices(self, ts, dur, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        self._batch(cat)


Collector = MemColumns


def part(cols: MemColumns, starts) -> dict | None:
    m = cols.model
    if cols.declined or m is None:
        return None
    rows = []
    for (tid, pid, kind), (n, total, mx, ts, end, majflt) in sorted(cols.stalls.items()):
        t = m.threads.get(tid)
        process = _process_name(m, pid)
        if t is None or not t.name or process is None or cols.pid_of(tid) != pid:
            return None  # a name or process the partial cannot be sure of as the trace has it
        rows.append(["stall", tid, t.name, pid, process, int(tid == pid), kind, n, total, mx, ts, end, majflt,
                     None, None])
    for ts, name, victim, pid, rss, killer in cols.oom:
        rows.append(["oom", None, victim, pid, killer, rss, name, None, None, None, ts, None, None, None, None])
    return {"set": {"version": VERSION, "params": BY_ID[CHECK].defaults(), "rows": rows},
            "chunks": [{} for _ in range(len(starts))]}


def merge(set_part: dict, chunk_parts: list, params: dict):
    """The check's rows: its SQL's reduce part run on the map rows of the set's part (None where the
    partial does not apply: run the SQL)."""
    if not made_with(set_part, VERSION, params):
        return None
    return reduced(CHECK, params, COLUMNS, set_part["rows"])
