"""Marks the roles of a PyTorch training's threads: main thread, DataLoader workers, pin-memory thread.

Derived from the process model alone (names and parentage), so it works for
any recording.  PyTorch renames DataLoader worker processes `pt_data_worker`
and the pin-memory thread `pt_data_pin` (both keep comm `python` until then).
The main training thread is the one that iterates the DataLoader, which is
the thread that forks the workers; the raw log keeps the forking tid only in
proc records, so it is taken as the leader thread of the workers' parent
process (the training loop runs there in every common launcher).  Without
workers, the leader of the first python process of the tree is marked.

What goes into the trace (category 'dataloader', one slice per role, on the
thread's own track, spanning its lifetime in the trace):
- 'main training thread'   args role='main_training_thread', dataloader_workers, worker_pids
- 'DataLoader worker <i>'  args role='dataloader_worker', worker_index, parent_pid
- 'DataLoader pin_memory thread'  args role='pin_memory_thread'
plus exit totals (faults, CPU, I/O bytes) when the counters family saw the
thread exit, and a pid-scoped counter 'dataloader.workers' on the training
process: how many of its workers are alive.
"""
from __future__ import annotations

from ..converters.families import FamilyConverter

WORKER_COMM = "pt_data_worker"
PIN_COMM = "pt_data_pin"
MAIN = "main training thread"


class DataLoaderConverter(FamilyConverter):

    def _totals(self, tid: int) -> dict:
        for fam in self.model.families:
            totals = getattr(fam, "exit_totals", None)
            if isinstance(totals, dict) and tid in totals:
                return totals[tid]
        return {}

    def _span(self, tid: int) -> tuple[int, int]:
        t = self.model.threads.get(tid)
        # +1: after the fork event at the same timestamp, so trace_processor binds
        # the track to the new thread, not to nothing.
        start = t.start_ts + 1 if t and t.start_ts is not None else self.model.start_ts()
        end = t.end_ts if t and t.end_ts is not None else self.model.end_ts()
        return start, max(end, start)

    def _mark(self, sink, tid: int, pid: int, name: str, args: dict) -> None:
        start, end = self._span(tid)
        sink.slice(start, end - start, tid, pid, name, "dataloader", {**args, **self._totals(tid)})

    def roles(self) -> tuple[dict[int, list[int]], list[int], list[tuple[int, int]]]:
        """(training pid -> its worker pids by start, main pids, pin threads (tid, pid))."""
        m = self.model
        workers: dict[int, list[int]] = {}
        for pid, p in m.processes.items():
            leader = m.threads.get(pid)
            named = p.name == WORKER_COMM or (leader is not None and leader.name == WORKER_COMM)
            if named and p.ppid is not None:
                workers.setdefault(p.ppid, []).append(pid)
        for pids in workers.values():
            pids.sort(key=lambda q: (m.processes[q].start_ts or 0, q))
        mains = sorted(workers) or self._first_python()
        pins = [(t.tid, t.tgid) for t in m.threads.values() if t.name == PIN_COMM and t.tgid is not None]
        return workers, mains, sorted(pins)

    def _first_python(self) -> list[int]:
        m = self.model
        roots = sorted((p for p in m.processes.values() if p.ppid not in m.processes),
                       key=lambda p: (p.start_ts or 0, p.pid))
        queue = [p.pid for p in roots]
        while queue:
            pid = queue.pop(0)
            p = m.processes[pid]
            argv0 = (p.cmdline[0] if p.cmdline else "").rsplit("/", 1)[-1]
            if (p.name or "").startswith("python") or argv0.startswith("python"):
                return [pid]
            queue.extend(sorted(q.pid for q in m.processes.values() if q.ppid == pid))
        return []

    def finish(self, sink) -> None:
        workers, mains, pins = self.roles()
        for pid in mains:
            if pid not in self.model.threads:
                continue
            wp = workers.get(pid, [])
            self._mark(sink, pid, pid, MAIN, {"role": "main_training_thread", "dataloader_workers": len(wp),
                                              "worker_pids": ",".join(map(str, wp)) or None})
        for ppid, wpids in workers.items():
            changes = []
            for i, pid in enumerate(wpids):
                self._mark(sink, pid, pid, f"DataLoader worker {i}",
                           {"role": "dataloader_worker", "worker_index": i, "parent_pid": ppid})
                start, end = self._span(pid)
                t = self.model.threads.get(pid)
                changes.append((start, 1))
                if t is not None and t.end_ts is not None:  # still alive at the end: no drop
                    changes.append((end, -1))
            if ppid in self.model.processes:
                level = 0
                for ts, d in sorted(changes, key=lambda c: (c[0], -c[1])):
                    level += d
                    sink.counter("dataloader.workers", ts, level, pid=ppid)
        for tid, pid in pins:
            self._mark(sink, tid, pid, "DataLoader pin_memory thread", {"role": "pin_memory_thread"})
