"""A line per rank for the recorder's summary: CPU time and the families'
counts (Family.rank_counts: CUDA/NCCL calls...) of each ranked process, read
back from the raw log once recording has ended (through the descriptor the
recorder holds on it).

Only when the recording found ranked processes (launchers set RANK...): one
pass over the log's sched, proc and counted rings' blocks, in bulk.  CPU time
is the time each thread of the process was switched in (from the sched
records on each CPU, to the next record there); drops are not attributable to
a process, so the line gives the recording's total.
"""
from __future__ import annotations

import numpy as np

from . import events as ev
from . import proc_records, sched_records
from .rawlog import KIND_META, KIND_RING, RawLogReader
from .registry import RANK_COUNTS, RING_DTYPES


def rank_lines(raw, drops: dict[str, int]) -> list[str]:
    """raw: a descriptor on the raw log the recorder wrote (read through it: the
    log's name is the user's, who may have pointed it at another file or a FIFO)."""
    ranks: dict[int, dict] = {}
    sched, procs = [], []
    counted: dict[int, list] = {c.ring: [] for c in RANK_COUNTS}  # ring id -> its decoded blocks
    with RawLogReader(raw) as rd:
        for blk in rd.blocks():
            if blk.kind == KIND_META:
                meta = blk.json()
                if meta.get("type") == "ranks":
                    for p in meta.get("processes", []):
                        if isinstance(p.get("pid"), int) and isinstance(p.get("rank"), int):
                            ranks[p["pid"]] = p
            elif blk.kind == KIND_RING and blk.ring == sched_records.RING_SCHED:
                sched.append(ev.decode_ring_bytes(blk.payload, sched_records.SCHED_EVENT))
            elif blk.kind == KIND_RING and blk.ring == proc_records.RING_PROC:
                procs.append(ev.decode_ring_bytes(blk.payload, proc_records.PROC_EVENT))
            elif blk.kind == KIND_RING and blk.ring in counted:
                counted[blk.ring].append(ev.decode_ring_bytes(blk.payload, RING_DTYPES[blk.ring]))
    if len(ranks) < 2:
        return []
    cpu = _cpu_ns_by_tgid(sched, procs)
    counts = [(c.label, _count_by_pid(c, counted[c.ring])) for c in RANK_COUNTS]
    lost = sum(drops.values())
    out = []
    for pid, r in sorted(ranks.items(), key=lambda kv: (kv[1]["rank"], kv[0])):
        world = f"/{r['world_size']}" if isinstance(r.get("world_size"), int) else ""
        out.append(f"rank {r['rank']}{world} (pid {pid}): CPU {cpu.get(pid, 0) / 1e9:.2f} s"
                   + "".join(f", {n.get(pid, 0):,} {label}" for label, n in counts)
                   + (f", drops {lost:,} in the recording" if lost else ""))
    return out


def _count_by_pid(count, parts: list) -> dict[int, int]:
    """pid -> records a RankCount counts among its ring's records."""
    if not parts:
        return {}
    recs = np.concatenate(parts)
    pids, n = np.unique(recs[count.counted(recs)][count.pid_field], return_counts=True)
    return dict(zip(pids.tolist(), n.tolist()))


def _cpu_ns_by_tgid(sched: list, procs: list) -> dict[int, int]:
    """Running time per process: each switch record starts its next task on
    its CPU until the following record on that CPU."""
    if not sched:
        return {}
    s = np.concatenate(sched)
    s = s[s["kind"] == sched_records.SCHED_SWITCH]
    if not s.size:
        return {}
    order = np.lexsort((s["ts"], s["cpu"]))
    s = s[order]
    same_cpu = s["cpu"][1:] == s["cpu"][:-1]
    dur = np.where(same_cpu, s["ts"][1:].astype(np.int64) - s["ts"][:-1].astype(np.int64), 0)
    nxt = s["target_tid"][:-1]
    # thread -> process, from the fork records (a process's first thread is its pid)
    tid_tgid: dict[int, int] = {}
    if procs:
        p = np.concatenate(procs)
        f = p[p["kind"] == proc_records.PROC_FORK]
        tid_tgid = dict(zip(f["child_tid"].tolist(), f["child_tgid"].tolist()))
    tids, idx = np.unique(nxt, return_inverse=True)
    per_tid = np.bincount(idx, weights=dur, minlength=tids.size)
    out: dict[int, int] = {}
    for tid, ns in zip(tids.tolist(), per_tid.tolist()):
        if tid == 0:
            continue
        tg = tid_tgid.get(tid, tid)
        out[tg] = out.get(tg, 0) + int(ns)
    return out
