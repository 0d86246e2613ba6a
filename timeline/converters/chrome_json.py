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

from .bulk_text import KeyIndex, decimal_times
from .model import OTHER_COMM, OTHER_TID_BASE, CpuSched, LogModel
from .track_events import ChromeTrackSink

DEFAULT_PRIO = 120
# prev_state bits as the kernel prints them (kernel >= 4.14 encoding)
_STATE_BITS = ((0x01, "S"), (0x02, "D"), (0x04, "T"), (0x08, "t"), (0x10, "X"),
               (0x20, "Z"), (0x40, "P"), (0x80, "I"))
_PREEMPT = 0x100  # TASK_REPORT_MAX: preempted while runnable, printed "R+"
_NO_LINE = (1 << 31) - 1  # "no next line" in a join key (line ids stay below)


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
        # distinct lines (all but the timestamp) and pairs of consecutive ones
        self._lines = KeyIndex(4)
        self._line_start: list[bytes] = []
        self._line_end: list[bytes] = []
        self._joins = KeyIndex(1)
        self._join_text = np.empty(64, object)  # by join id: bytes
        self._n_joins = 0
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
        """All chunks of a raw block at once, lines assembled with numpy.

        A line is "<start><sec>.<ns>5: <event>: <args>\\n", where start is
        "<comm>-<tid> (<tgid>) [<cpu>] <flags> " of the task it names.  The
        text between two timestamps, "5: <event>: <args>\\n<start of the next
        line>", depends only on the two lines' fields, few combinations of
        which occur: each is built once (a "join"), so a line costs its digits
        and a gather of its join.
        """
        n = sum(c.sw_ts.size + c.wk_ts.size for c in chunks)
        if not n:
            return
        # Per line, switches then wakings of each chunk: the task the line
        # starts with, the other task, two prios, state or target CPU, kind+CPU.
        head, other, prio_a, prio_b, arg, kc, ts = (np.empty(n, np.int64) for _ in range(7))
        order = []  # per chunk, its lines in time order
        o = 0
        for c in chunks:
            ns_, nw = c.sw_ts.size, c.wk_ts.size
            if ns_:
                sl = slice(o, o + ns_)
                head[sl], other[sl], arg[sl], prio_b[sl], ts[sl] = c.sw_prev, c.sw_next, c.sw_state, c.sw_prio, c.sw_ts
                prio_a[o] = self._prio.get(c.cpu, DEFAULT_PRIO)  # prev_prio: the prio it was switched in with
                prio_a[o + 1: o + ns_] = c.sw_prio[:-1]
                self._prio[c.cpu] = int(c.sw_prio[-1])
                kc[sl] = c.cpu << 1
            if nw:
                sl = slice(o + ns_, o + ns_ + nw)
                head[sl], other[sl], arg[sl], prio_a[sl], ts[sl] = c.wk_waker, c.wk_woken, c.wk_cpu, c.wk_prio, c.wk_ts
                prio_b[sl] = 0
                kc[sl] = (c.cpu << 1) | 1
            if ns_ and nw:
                # two sorted runs: a stable sort merges them, switches first at equal times
                order.append(o + np.argsort(ts[o: o + ns_ + nw], kind="stable"))
            else:
                order.append(np.arange(o, o + ns_ + nw))
            o += ns_ + nw
        # tids and prios are 32-bit values: two to a key column
        tids = (head.view(np.uint64) << np.uint64(32)) | other.view(np.uint64)
        prios = prio_a * (1 << 32) + (prio_b & 0xFFFFFFFF)
        line, new_ids, new_rows = self._lines.lookup([tids.view(np.int64), prios, arg, kc])
        for i in new_rows.tolist():
            self._add_line(int(head[i]), int(other[i]), int(prio_a[i]), int(prio_b[i]), int(arg[i]), int(kc[i]))
        order = np.concatenate(order)
        line, ts = line[order], ts[order]
        # join of each line with the next; the last one ends the block's text
        nxt = np.empty(n, np.int64)
        nxt[:-1], nxt[-1] = line[1:], _NO_LINE
        join, new_ids, new_rows = self._joins.lookup([(line << 31) | nxt])
        self._add_joins([self._line_end[int(line[i])] +
                         (self._line_start[int(nxt[i])] if nxt[i] != _NO_LINE else b"")
                         for i in new_rows.tolist()])
        parts = [self._line_start[int(line[0])]] * (2 * n + 1)  # (Python lists interleave fastest)
        parts[1::2] = decimal_times(ts)
        parts[2::2] = self._join_text[join].tolist()
        self._wb(b"".join(parts))

    def _add_joins(self, pieces: list[bytes]) -> None:
        n = self._n_joins + len(pieces)
        if n > self._join_text.size:
            grown = np.empty(max(n, 2 * self._join_text.size), object)
            grown[: self._n_joins] = self._join_text[: self._n_joins]
            self._join_text = grown
        self._join_text[self._n_joins: n] = pieces
        self._n_joins = n

    def _add_line(self, head: int, other: int, prio_a: int, prio_b: int, arg: int, kc: int) -> None:
        """Text of a new distinct line (all but its timestamp), in two parts."""
        cpu, waking = kc >> 1, kc & 1
        self._line_start.append(f"{self.head[head]}[{cpu:03d}] {'d..3.' if waking else '.....'} ".encode())
        if waking:
            end = f"comm={self.comm[other]} pid={other} prio={prio_a} target_cpu={arg:03d}"
        else:
            end = (f"{self.prev_part[head]}{prio_a} prev_state={self.state[arg]} ==> "
                   f"{self.next_part[other]}{prio_b}")
        self._line_end.append(f"5: {'sched_waking' if waking else 'sched_switch'}: {end}\\n".encode())

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
