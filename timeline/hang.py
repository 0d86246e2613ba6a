"""--hang-timeout: notice when the recorded job stops making progress (issue 15).

Progress, checked about twice a second, is any of:
  - a traced CUDA/NCCL call returned (a plugin's ``progress()`` count grew:
    the cuda family counts its ring's records, written when calls return);
  - a process of the job started or ended (the proc ring moved);
  - a process's main thread was seen running (state R), for jobs that have
    made no traced CUDA call yet (a CPU-only job, or one still starting up).
    Once CUDA calls flow, a running main thread is no longer progress: a hung
    collective often spins on a CPU.
No progress for the whole timeout means hung: the recorder notes, per thread,
the traced call still open on it (from the cuda family's in-flight stash) or
its scheduler state and kernel wait channel, then writes a dump.  It fires
once per hang; progress re-arms it.
"""
from __future__ import annotations

import os

from . import proc_records


PROC_LINE_BYTES = 4096  # stat and wchan of one thread: a line each, far shorter


def _read(path: str) -> str:
    """A /proc file of the kernel's, bounded (the thread may be gone: '')."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return os.read(fd, PROC_LINE_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def thread_state(pid: int, tid: int) -> tuple[str, str, str]:
    """(state letter, name, wchan) from /proc; '' when gone."""
    stat = _read(f"/proc/{pid}/task/{tid}/stat")
    if not stat:
        return "", "", ""
    name = stat[stat.find("(") + 1 : stat.rfind(")")]
    state = stat[stat.rfind(")") + 2 :].split(" ", 1)[0]
    return state, name, _read(f"/proc/{pid}/task/{tid}/wchan").strip()


def threads_of(pids) -> dict[int, int]:
    """tid -> tgid for every thread of these processes."""
    out = {}
    for pid in pids:
        try:
            for t in os.listdir(f"/proc/{pid}/task"):
                out[int(t)] = pid
        except OSError:
            pass
    return out


class HangWatch:
    def __init__(self, timeout_s: float, now_ns: int):
        self.timeout_ns = int(timeout_s * 1e9)
        self.last_progress = now_ns
        self._counts: tuple = ()
        self.fired = False

    def poll(self, ctx, plugins, now_ns: int) -> bool:
        """True once when the job has made no progress for the timeout."""
        session = ctx.session
        counts = tuple(p.progress(ctx) for p in plugins)
        proc = session.readers[proc_records.RING_PROC].records
        moved = (counts, proc) != self._counts
        if not moved and not any(counts):
            moved = any(thread_state(pid, pid)[0] == "R" for pid in list(ctx.processes))
        self._counts = (counts, proc)
        if moved:
            self.last_progress, self.fired = now_ns, False
            return False
        if self.fired or now_ns - self.last_progress < self.timeout_ns:
            return False
        self.fired = True
        return True

    def snapshot(self, ctx, plugins, now_ns: int) -> dict:
        """The "hang" meta block: per thread, the open call or the state, and since when."""
        threads = threads_of(list(ctx.processes))
        calls: dict[int, dict] = {}
        for p in plugins:
            try:
                calls.update(p.in_flight(ctx, threads, now_ns))
            except Exception as e:  # a plugin must not cost the dump
                ctx.summary.append(f"warning: {p.family}: reading calls in flight failed: {e}")
        rows = []
        for tid, pid in sorted(threads.items()):
            state, name, wchan = thread_state(pid, tid)
            row = {"pid": pid, "tid": tid, "name": name, "state": state, "wchan": wchan}
            if tid in calls:
                row.update(calls[tid])
            rows.append(row)
        return {"type": "hang", "ts": now_ns, "no_progress_since": self.last_progress, "threads": rows}
