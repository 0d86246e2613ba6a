"""mem records -> memory-pressure slices on the stalled threads, OOM kills.

Stalls: a slice on the thread (category 'memory'), named 'direct reclaim'
(the machine was short of memory), 'memcg reclaim' (the thread's cgroup was
at its limit or memory.high) or 'compaction' (an allocation that compacted
memory; 'requested compaction' when order is -1: the thread asked for it,
e.g. by writing /proc/sys/vm/compact_memory, not a stall of its
allocations, so memory_pressure leaves it out); args order, gfp (hex),
pages_reclaimed (reclaim) or result (compaction), and the thread's fault
counts when the stall ended: major_faults, minor_faults, and
major_faults_since_last_stall.

OOM kills: on a victim of the recorded tree, an instant 'killed by OOM'
(category 'memory') on its thread and the process counter 'oom_killed'
(0 -> 1 at the kill: a mark on the process's own tracks); on a tracked thread
whose allocation invoked the killer for another process, an instant 'invoked
the OOM killer'.  A victim outside the tree (machine context) is a
zero-length slice 'OOM kill: NAME (pid N)' on the global track
'OOM kills (other processes)'.  Args: victim, pid, tid, rss_bytes,
total_vm_bytes, oom_score_adj, killer, killer_pid, killer_tid, in_job.
"""
from __future__ import annotations

import os

from .. import events as ev
from ..converters.families import FamilyConverter
from . import mem_records as mr

PAGE = os.sysconf("SC_PAGE_SIZE")
STALLS = {mr.MEM_DIRECT_RECLAIM: "direct reclaim", mr.MEM_MEMCG_RECLAIM: "memcg reclaim",
          mr.MEM_COMPACTION: "compaction"}
REQUESTED_COMPACTION = "requested compaction"  # order -1: compact whole zones (compact_memory, sysfs)
# enum compact_result (include/linux/compaction.h); values past it are shown as numbers
COMPACT_RESULTS = {0: "not_suitable_zone", 1: "skipped", 2: "deferred", 3: "no_suitable_page", 4: "continue",
                   5: "complete", 6: "partial_skipped", 7: "contended", 8: "success"}
OTHER_OOM_TRACK = "OOM kills (other processes)"


class MemConverter(FamilyConverter):
    rings = (mr.RING_MEM,)

    def __init__(self, model):
        super().__init__(model)
        self._last_majflt: dict[int, int] = {}   # tid -> major faults at its previous stall's end

    def emit_ring(self, sink, ring, recs) -> None:
        for r in recs[recs["ts"].argsort(kind="stable")]:
            kind = int(r["kind"])
            if kind in STALLS:
                self._stall(sink, r, kind)
            elif kind == mr.MEM_OOM_KILL:
                self._oom(sink, r)

    def _stall(self, sink, r, kind: int) -> None:
        tid, maj = int(r["tid"]), int(r["maj_flt"])
        prev = self._last_majflt.get(tid)
        self._last_majflt[tid] = maj
        args = {"order": int(r["order"]), "gfp": hex(int(r["gfp"])), "major_faults": maj,
                "minor_faults": int(r["min_flt"]),
                "major_faults_since_last_stall": maj - prev if prev is not None else None}
        if kind == mr.MEM_COMPACTION:
            res = int(r["nr"]) - (1 << 64) if int(r["nr"]) >= 1 << 63 else int(r["nr"])
            args["result"] = COMPACT_RESULTS.get(res, str(res))
        else:
            args["pages_reclaimed"] = int(r["nr"])
        ts = int(r["ts"])
        name = REQUESTED_COMPACTION if kind == mr.MEM_COMPACTION and int(r["order"]) < 0 else STALLS[kind]
        sink.slice(ts, max(int(r["end_ts"]) - ts, 0), tid, int(r["tgid"]), name, "memory",
                   {k: v for k, v in args.items() if v is not None})

    def _oom(self, sink, r) -> None:
        ts, tid, pid = int(r["ts"]), int(r["tid"]), int(r["tgid"])
        by_tid, by_pid = int(r["by_tid"]), int(r["by_tgid"])
        flags = int(r["flags"])
        in_job = bool(flags & mr.MF_VICTIM_TRACKED)
        name = ev.cstr(r["comm"]) or (self.model.thread_name(tid) if in_job else "") or "?"
        killer = self.model.thread_name(by_tid) if flags & mr.MF_KILLER_TRACKED else ""
        args = {"victim": name, "pid": pid, "tid": tid, "rss_bytes": int(r["nr"]) * PAGE,
                "total_vm_bytes": int(r["gfp"]) * PAGE, "oom_score_adj": int(r["order"]),
                "major_faults": int(r["maj_flt"]), "killer": killer or None, "killer_pid": by_pid,
                "killer_tid": by_tid, "in_job": in_job}
        args = {k: v for k, v in args.items() if v is not None}
        if in_job:
            sink.instant(ts, tid, pid, "killed by OOM", "memory", args)
            if pid in self.model.processes:
                start, _ = self.model.lifetime("process", pid)
                sink.counter("oom_killed", start if start is not None and start < ts else ts, 0, pid=pid)
                sink.counter("oom_killed", ts, 1, pid=pid)
        else:
            sink.async_slice(OTHER_OOM_TRACK, ts, 0, f"OOM kill: {name} (pid {pid})", "memory", args)
        if flags & mr.MF_KILLER_TRACKED and by_pid != pid:
            sink.instant(ts, by_tid, by_pid, "invoked the OOM killer", "memory", args)
