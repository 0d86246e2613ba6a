"""`timeline merge --split`: several machines' recordings merged as a trace set.

Each input is a machine: a trace set (recorded with --split) or one trace (a
set of one chunk).  The merged set has one chunk per chunk of the first
input (the clock reference); every other machine's chunk goes into the merged
chunk whose window holds its middle, in the reference's clock (the same
REALTIME alignment as merge_traces, one shift per machine for all its chunks).
Each merged chunk is written by merge_traces.merge from just its member
chunks, read one window at a time, so memory is that of one window, not of
the job.  Machines recorded with the same --split duration line up window for
window; otherwise a merged chunk spans its members (windows may overlap by
the machines' offsets) and the index says which machine chunk went where.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from . import merge_traces as mt
from .trace_set import CHUNK_NAME, FORMAT, INDEX, VERSION, is_trace_set, read_index


@dataclass
class Machine:
    path: str                      # the set directory or the trace
    chunks: list[dict]             # its index chunks (file: a path), or one for a trace
    host: str = ""
    rank: int | None = None
    clock: mt.Input | None = None  # its first chunk's clock snapshot (data dropped)
    shift: int = 0
    members: list = field(default_factory=list)


def load(path: str, read, user=None) -> Machine:
    """A machine from a set or a trace; read(path) -> bytes (as the user, decompressed)."""
    if is_trace_set(path):
        idx = read_index(path, user)
        chunks = [dict(c, file=os.path.join(path, c["file"])) for c in idx["chunks"]]
    else:
        chunks = [{"file": path}]
    first = mt.parse(chunks[0]["file"], read(chunks[0]["file"]))
    first.data = b""
    if "start_ns" not in chunks[0]:  # a trace: its own extent
        chunks[0].update(start_ns=first.start, end_ns=first.end + 1)
    ranks = {c.get("rank") for c in chunks}
    host = chunks[0].get("machine") or first.host
    return Machine(path, chunks, str(host or ""), ranks.pop() if len(ranks) == 1 else None, first)


def plan(machines: list[Machine]) -> list[list[tuple[int, dict]]]:
    """Per merged chunk: (machine number, chunk) of its members."""
    ref = machines[0]
    mt.align([m.clock for m in machines])
    windows = [(c["start_ns"], c["end_ns"]) for c in ref.chunks]
    out: list[list[tuple[int, dict]]] = [[] for _ in windows]
    for i, m in enumerate(machines):
        m.shift = m.clock.shift
        for c in m.chunks:
            mid = (c["start_ns"] + c["end_ns"]) // 2 + m.shift
            k = next((j for j, (a, b) in enumerate(windows) if mid < b), len(windows) - 1)
            out[k].append((i, c))
    return out


def write(machines: list[Machine], read, out, write_all, progress=None) -> tuple[list[dict], int]:
    """The merged chunks into `out` (safe_output.OutputDir), through write_all(fd, bytes);
    returns (index chunks, bytes written)."""
    groups = plan(machines)
    ref = machines[0].clock
    chunks, total = [], 0
    for k, members in enumerate(groups):
        name = CHUNK_NAME.format(k + 1)
        inputs = [mt.parse(c["file"], read(c["file"])) for _, c in members]
        fd = out.create(name)
        try:
            size = mt.merge(inputs, lambda b: write_all(fd, b), [i for i, _ in members], ref)
        finally:
            os.close(fd)
        total += size
        lo = min(c["start_ns"] + machines[i].shift for i, c in members)
        hi = max(c["end_ns"] + machines[i].shift for i, c in members)
        fam: dict = {}
        for _, c in members:
            for f, n in (c.get("family_events") or {}).items():
                fam[f] = fam.get(f, 0) + int(n)
        chunks.append({"file": name, "start_ns": int(lo), "end_ns": int(hi), "bytes": size,
                       "events": sum(int(c.get("events") or 0) for _, c in members),
                       "families": sorted(fam), "machine": None, "rank": None,
                       "switches": sum(int(c.get("switches") or 0) for _, c in members),
                       "family_events": dict(sorted(fam.items())),
                       "machines": [{"machine_id": i, "machine": machines[i].host or None,
                                     "rank": c.get("rank", machines[i].rank),
                                     "source": c["file"], "shift_ns": machines[i].shift} for i, c in members]})
        if progress:
            progress(k + 1, len(groups))
    body = json.dumps({"format": FORMAT, "version": VERSION, "source": [m.path for m in machines],
                       "chunks": chunks}, indent=1).encode()
    fd = out.create(INDEX)
    try:
        write_all(fd, body)
    finally:
        os.close(fd)
    return chunks, total + len(body)
