"""Raw log -> Chrome JSON trace (the secondary format).

Layout, written as a stream (nothing proportional to the event count is held):

    {"traceEvents": [ph "M" process_name / thread_name / labels ...],
     "systemTraceEvents": "<ftrace text: sched_switch / sched_waking lines>",
     "metadata": {"timeline": {drops, clock, uname, command, ...}}}

trace_processor (and the Perfetto UI) parse systemTraceEvents with their
systrace line parser, which fills the same sched / thread_state tables as the
protobuf output.  That parser only knows sched_switch and sched_waking among
our events (task_newtask, task_rename, sched_process_free lines are ignored),
so thread names come from the "M" events and the comms in the lines, and
fork/exit times and process parentage are not in this format.

Text line timestamps are seconds with ten decimals: the nanoseconds plus a
trailing 5 (half a nanosecond), because the parser multiplies a double by 1e9
and truncates; the extra half keeps the result on the exact nanosecond.
"""
from __future__ import annotations

import numpy as np
import orjson

from .model import OTHER_COMM, OTHER_TID_BASE, CpuSched, LogModel
from .track_events import ChromeTrackSink

DEFAULT_PRIO = 120
# prev_state bits as the kernel prints them (kernel >= 4.14 encoding)
_STATE_BITS = ((0x01, "S"), (0x02, "D"), (0x04, "T"), (0x08, "t"), (0x10, "X"),
               (0x20, "Z"), (0x40, "P"), (0x80, "I"))
_PREEMPT = 0x100  # TASK_REPORT_MAX: preempted while runnable, printed "R+"


def state_str(v: int) -> str:
    letters = "|".join(c for bit, c in _STATE_BITS if v & bit)
    return (letters or "R") + ("+" if v & _PREEMPT else "")


def _jstr(s: str) -> str:
    """s escaped for the inside of a JSON string."""
    return orjson.dumps(s).decode()[1:-1]


class _Cache(dict):
    """dict that computes missing entries: plain d[k] in the hot loops."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def __missing__(self, k):
        v = self[k] = self.fn(k)
        return v


class ChromeJsonWriter:
    def __init__(self, f, model: LogModel):
        self.f = f
        self.m = model
        self.out_bytes = 0
        self._prio: dict[int, int] = {}   # cpu -> prio of the task running there
        # per-tid pieces of text lines, built once per thread
        self.comm = _Cache(self._comm)
        self.head = _Cache(self._head)
        self.prev_part = _Cache(lambda t: f"prev_comm={self.comm[t]} prev_pid={t} prev_prio=")
        self.next_part = _Cache(lambda t: f"next_comm={self.comm[t]} next_pid={t} next_prio=")
        self.state = _Cache(state_str)
        self._switch_suffix = _Cache(self._make_switch_suffix)
        self._waking_suffix = _Cache(self._make_waking_suffix)
        # Families (CUDA, I/O, counters...) write events through this.
        self.sink = ChromeTrackSink(model.thread_tgid)

    def _w(self, s: str) -> None:
        self._wb(s.encode())

    def _wb(self, b: bytes) -> None:
        self.f.write(b)
        self.out_bytes += len(b)

    # -- names
    def _comm(self, tid: int) -> str:
        name = self.m.thread_name(tid) or "<...>"
        # the line parser splits lines on newlines and args on spaces and '='
        return _jstr("".join(ch if ch.isprintable() and ch not in " =" else "_" for ch in name))

    def _head(self, tid: int) -> str:
        """The line prefix naming the current task: "comm-tid (tgid) "."""
        tgid = self.m.thread_tgid(tid) if tid < OTHER_TID_BASE else None
        tg = f"{tgid:5d}" if tgid is not None else "-----"
        return f"{self.comm[tid]:>16}-{tid:<7d} ({tg}) "

    # -- stream
    def begin(self) -> None:
        # Sched text streams first; traceEvents (names + family events spooled
        # by the sink) are written at the end: trace_processor accepts the
        # top-level keys in any order.
        self._w('{"systemTraceEvents":"# tracer: nop\\n#\\n')

    def _metadata_events(self) -> list[dict]:
        m = self.m
        evs = []
        for pid, p in sorted(m.processes.items()):
            name = p.name or (p.cmdline[0] if p.cmdline else None)
            if name:
                evs.append({"ph": "M", "name": "process_name", "pid": pid, "tid": pid, "args": {"name": name}})
            if p.cmdline and not p.cmdline_is_comm:
                evs.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": pid,
                            "args": {"labels": " ".join(p.cmdline)}})
        for tid, t in sorted(m.threads.items()):
            if t.tgid is not None and t.name:
                evs.append({"ph": "M", "name": "thread_name", "pid": t.tgid, "tid": tid,
                            "args": {"name": t.name}})
        return evs

    def sched(self, chunks: list[CpuSched]) -> None:
        for c in chunks:
            lines = self._switch_lines(c) + self._waking_lines(c)
            if c.wk_ts.size and c.sw_ts.size:  # keep the CPU's lines in time order
                order = np.argsort(np.concatenate([c.sw_ts, c.wk_ts]), kind="stable")
                lines = [lines[i] for i in order.tolist()]
            if lines:
                self._w("\\n".join(lines) + "\\n")

    @staticmethod
    def _sec_ns(ts: np.ndarray) -> tuple[list, list]:
        sec, ns = np.divmod(ts, 1_000_000_000)
        return sec.tolist(), ns.tolist()

    def _switch_lines(self, c: CpuSched) -> list[str]:
        if c.sw_ts.size == 0:
            return []
        cpu = f"[{c.cpu:03d}] ....."
        prio = c.sw_prio.tolist()
        prev_prio = [self._prio.get(c.cpu, DEFAULT_PRIO)] + prio[:-1]
        self._prio[c.cpu] = prio[-1]
        head, suffix = self.head, self._switch_suffix
        sec, ns = self._sec_ns(c.sw_ts)
        # Everything after the timestamp depends only on (prev, next, state,
        # prios): a few combinations repeat, so each text is built once.
        return [f"{head[p]}{cpu} {s}.{n:09d}5: sched_switch: {suffix[(p, x, st, pp, pr)]}"
                for s, n, p, x, st, pp, pr in zip(sec, ns, c.sw_prev.tolist(), c.sw_next.tolist(),
                                                   c.sw_state.tolist(), prev_prio, prio)]

    def _make_switch_suffix(self, key) -> str:
        p, x, st, pp, pr = key
        return f"{self.prev_part[p]}{pp} prev_state={self.state[st]} ==> {self.next_part[x]}{pr}"

    def _waking_lines(self, c: CpuSched) -> list[str]:
        if c.wk_ts.size == 0:
            return []
        cpu = f"[{c.cpu:03d}] d..3."
        head, suffix = self.head, self._waking_suffix
        sec, ns = self._sec_ns(c.wk_ts)
        return [f"{head[w]}{cpu} {s}.{n:09d}5: sched_waking: {suffix[(k, pr, tc)]}"
                for s, n, w, k, pr, tc in zip(sec, ns, c.wk_waker.tolist(), c.wk_woken.tolist(),
                                              c.wk_prio.tolist(), c.wk_cpu.tolist())]

    def _make_waking_suffix(self, key) -> str:
        k, pr, tc = key
        return f"comm={self.comm[k]} pid={k} prio={pr} target_cpu={tc:03d}"

    def proc(self, recs: np.ndarray) -> None:
        pass  # names/cmdlines are already in the "M" events; the text parser ignores the rest

    def snapshot(self, meta: dict) -> None:
        pass

    def finish(self) -> None:
        m = self.m
        h = m.header
        meta = {
            "timeline": {
                "version": h.get("timeline_version"),
                "mode": h.get("mode"),
                "command": h.get("command"),
                "target_pid": h.get("target_pid"),
                "clock": h.get("clock"),
                "uname": h.get("uname"),
                "ncpu": h.get("ncpu"),
                "finalized": m.finalized,
                "damage": None if m.damage is None else {"offset": m.damage.offset, "reason": m.damage.reason},
                "drops": m.drops,
                "drops_per_cpu": (m.end or {}).get("drops"),
                "drop_causes": (m.end or {}).get("drop_causes"),
                "exit_code": (m.end or {}).get("exit_code"),
                "stop_reason": (m.end or {}).get("reason"),
                "other_thread": f"tid {OTHER_TID_BASE} + cpu, named {OTHER_COMM!r}: idle or an untracked task",
            }
        }
        self._w('",\n"traceEvents":[')
        self.sink.drain_into(self._wb)
        self._w(",\n".join(orjson.dumps(e).decode() for e in self._metadata_events()) or "{}")
        self._w('],\n"metadata":')
        self._w(orjson.dumps(meta).decode())
        self._w("}\n")


__all__ = ["ChromeJsonWriter", "state_str"]
