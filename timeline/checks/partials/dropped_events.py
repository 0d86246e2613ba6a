"""dropped_events (sql/dropped_events.sql) as a partial computed at conversion.

What the SQL reads of the one trace is what the writer puts in it from the LogModel's END block
(writer.py: ftrace_stats per CPU, END_OF_TRACE overrun = the "full" drops, dropped_events = every
drop, so their max is every drop; a 'timeline: <ring> records dropped' counter per ring, 0 at the
model's start_ts and the total at its end_ts) and the count of the `sched` table: every switch written
but each CPU's first, which trace_processor skips (it has no prev). So the collector counts the
switches of the sched blocks and the CPUs they are on, and reads the model at the end; the set part
is the finding's numbers, the chunk parts are empty. Bounded: a count per CPU.

No partial (the SQL runs) without an END block (no stats, no counters: the check's data is not
recorded) or for other parameters than the defaults. A ring whose drops are a total, not a list
per CPU (older logs), is in its counter and not in the stats: the merge takes the larger sum, as the SQL.
"""
from __future__ import annotations

from ..catalog import BY_ID
from ._gpu import _fixed, made_with

CHECK = "dropped_events"
VERSION = 1


class Collector:
    """Switches per CPU, as the sched blocks reach the trace."""

    def __init__(self):
        self.model = None
        self.switches = 0
        self.cpus: set = set()  # CPUs with a switch: each loses its first in trace_processor

    def sched(self, chunks) -> None:
        for c in chunks:
            if c.sw_ts.size:
                self.switches += int(c.sw_ts.size)
                self.cpus.add(int(c.cpu))

    def slices(self, *a, **k) -> None:
        pass  # not read

    def slice(self, *a, **k) -> None:
        pass

    def group_slices(self, *a, **k) -> None:
        pass


def part(cols: Collector, starts) -> dict | None:
    m = cols.model
    if m is None or m.end is None:
        return None
    per_cpu = m.drops_per_cpu()
    full = m.drops_per_cpu("full")
    ncpu = m.ncpu()
    cpu_dropped = {c: max(per_cpu.get(c, 0), full.get(c, 0)) for c in range(ncpu)}
    families = [(ring.replace("timeline: ", "").replace(" records dropped", ""), n)
                for ring, n in sorted(m.drops.items())]  # the writer's track order
    return {"set": {"version": VERSION, "params": BY_ID[CHECK].defaults(),
                    "cpus": ncpu, "per_cpu": [[c, cpu_dropped[c]] for c in range(ncpu)],
                    "families": [[f, n] for f, n in families],
                    "recorded": cols.switches - len(cols.cpus),
                    "start": m.start_ts(), "end": m.end_ts()},
            "chunks": [{} for _ in range(len(starts))]}


def merge(set_part: dict, chunk_parts: list, params: dict):
    if not made_with(set_part, VERSION, params):
        return None
    fams = [(f, n) for f, n in set_part["families"] if n > 0]
    cpus = [(c, n) for c, n in set_part["per_cpu"] if n > 0]
    dropped = max(sum(n for _, n in cpus), sum(n for _, n in fams))
    recorded = set_part["recorded"]
    row = {"severity": "ok", "ts": None, "dur": None, "hint": None, "dropped": dropped,
           "recorded_switches": recorded, "dropped_per_cpu": " ".join(f"{c}:{n}" for c, n in cpus) or None}
    if dropped == 0:
        row["finding"] = f"no events lost ({set_part['cpus']} CPUs, {recorded:,} switches recorded)"
        return [row]
    row["severity"] = "error" if dropped >= params["error_fraction"] * (recorded + dropped) else "warning"
    by_family = ("; by family: " + ", ".join(f"{f} {n}" for f, n in fams)) if fams else ""
    row["finding"] = (f"{dropped:,} events were lost ({_fixed(100.0 * dropped / (recorded + dropped), 1)}% of what "
                      f"the kernel emitted, against {recorded:,} recorded switches){by_family}; the other checks "
                      "see an incomplete trace")
    if fams:  # the drops lie between the counters' zero at the start and their totals at the end
        row["ts"], row["dur"] = set_part["start"], set_part["end"] - set_part["start"]
    return [row]
