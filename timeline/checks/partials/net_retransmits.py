"""net_retransmits (sql/net_retransmits.sql) as a partial computed at conversion: the clean case only.

A recording whose connections had no retransmit after a loss gives the SQL's one 'ok' row, which
counts the tail loss probes (instants 'tcp retransmit', category net, whose `lost` argument is 0).
The collector counts the instants of both kinds; the set's part holds the two counts. With any
retransmit after a loss, the findings depend on what each process was waiting for (thread states,
NCCL calls, DataLoader workers, ranks): no partial then, the SQL runs.
"""
from __future__ import annotations

from ..catalog import BY_ID
from ._gpu import made_with

CHECK = "net_retransmits"
VERSION = 1
COLUMNS = ("severity", "finding", "ts", "dur", "hint", "conn", "peer", "rank", "retransmits", "rtos",
           "in_collective", "in_dataloader", "srtt_max_ms")


class Retransmits:
    """How many 'tcp retransmit' instants were written, probes (lost = 0) and the others."""

    def __init__(self):
        self.probes = 0
        self.lost = 0

    def slices(self, *a, **kw):  # every collector is fed slices; this one reads none
        pass

    slice = group_slices = slices

    def instant(self, ts, tid, pid, name, cat, args=None):
        if name != "tcp retransmit" or cat != "net":
            return
        v = (args or {}).get("lost")
        # the SQL: coalesce(lost, 1): a missing (or unreadable) argument counts as a loss
        if isinstance(v, (bool, int, float)) and v == 0:
            self.probes += 1
        else:
            self.lost += 1


Collector = Retransmits


def part(r: Retransmits, starts) -> dict | None:
    if r.lost:
        return None
    return {"set": {"version": VERSION, "params": BY_ID[CHECK].defaults(), "probes": r.probes},
            "chunks": [{} for _ in starts]}


def merge(set_part: dict, chunk_parts: list, params: dict):
    if not made_with(set_part, VERSION, params):
        return None
    row = dict.fromkeys(COLUMNS)
    row.update(severity="ok", finding="no TCP retransmits after a loss on the recorded connections "
                                      f"({int(set_part['probes'])} tail loss probes)")
    return [row]
