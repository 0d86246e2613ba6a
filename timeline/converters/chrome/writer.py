"""Raw log -> Chrome JSON trace (the secondary format).

Layout, written as a stream (nothing proportional to the event count is held):

    {"systemTraceEvents": "<ftrace text: sched_switch / sched_waking lines>",
     "traceEvents": [family events ..., ph "M" process_name / thread_name / labels ...],
     "stackFrames": {id: {name, category, parent}}   (only with call stacks: sink.py)
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

The text is built a raw block at a time with numpy (sched(), bulk_text): per
line only its digits are new, the rest is gathered from pieces built once.
A second thread writes (and gzips) while the next block is built.
"""
from __future__ import annotations

import os

import queue
import threading
import weakref

import numpy as np
import orjson

from ..model import IDLE_TID, OUTSIDE_COMM, OUTSIDE_TID, CpuSched, LogModel
from ...ranks import rank_label
from .bulk_text import KeyIndex, decimal_times
from .sink import JSON_SYSTEM_NAME, JSON_SYSTEM_PID, ChromeTrackSink

DEFAULT_PRIO = 120
# prev_state bits as the kernel prints them (kernel >= 4.14 encoding)
_STATE_BITS = ((0x01, "S"), (0x02, "D"), (0x04, "T"), (0x08, "t"), (0x10, "X"),
               (0x20, "Z"), (0x40, "P"), (0x80, "I"))
_PREEMPT = 0x100  # TASK_REPORT_MAX: preempted while runnable, printed "R+"
_NO_LINE = (1 << 31) - 1  # "no next line" in a join key (line ids stay below)
_SHIFT32, _MASK32, _U32 = 1 << 32, 0xFFFFFFFF, np.uint64(32)
# The idle task in the text lines.  trace_processor's text parser does not
# map pid 0 to its idle thread (utid 0) as the protobuf parsers do: it makes
# a second thread 0 in a second process 0, which the UI shows as a process of
# its own with coloured "<idle>" slices.  A process-less pseudo thread next to
# "outside the recording" keeps the thread/process tables clean and groups
# it at the end; the CPU tracks still show the idle time as "idle" slices.
JSON_IDLE_TID = OUTSIDE_TID + 1
JSON_IDLE_COMM = "idle"


def json_tids(tids: np.ndarray) -> np.ndarray:
    """Tids as the text lines show them: the idle task (0) as JSON_IDLE_TID."""
    return np.where(tids == IDLE_TID, JSON_IDLE_TID, tids)


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


class _WriterThread:
    """Writes byte strings to f from a second thread, in order.

    zlib (.json.gz) and the write syscall release the GIL, so compressing and
    writing one block overlaps with building the next block's text; at gzip
    level 5 compressing costs more per line than everything else.
    """

    def __init__(self, f, depth: int = 3):
        self._q: queue.Queue = queue.Queue(depth)
        self._error: list[BaseException] = []
        self._thread = threading.Thread(target=_write_loop, args=(f, self._q, self._error),
                                        name="timeline-json-writer", daemon=True)
        self._thread.start()
        # a conversion stopped by an exception never calls close(): end the
        # thread when this object goes away
        self._finalizer = weakref.finalize(self, _abandon, self._q)

    def write(self, b: bytes) -> None:
        if self._error:
            raise self._error[0]
        self._q.put(b)

    def close(self) -> None:
        """Wait until everything is written; raise the first write error."""
        self._finalizer.detach()
        self._q.put(None)
        self._thread.join()
        if self._error:
            raise self._error[0]


def _write_loop(f, q: queue.Queue, error: list) -> None:
    while (b := q.get()) is not None:
        if not error:  # after a failure only drain: the writer raises it
            try:
                f.write(b)
            except BaseException as e:  # noqa: BLE001 - handed to the converting thread
                error.append(e)


def _abandon(q: queue.Queue) -> None:
    """Stop the thread; what is still queued is dropped with the conversion."""
    while True:
        try:
            q.put_nowait(None)
            return
        except queue.Full:
            try:
                q.get_nowait()
            except queue.Empty:
                pass


def process_order(m: LogModel) -> list[int]:
    """Recorded pids depth first from the roots of the tree (processes whose
    parent was not recorded), each level by rank (torchrun's workers), then
    fork time, then pid."""
    kids: dict[int | None, list] = {}
    for pid, p in m.processes.items():
        parent = p.ppid if p.ppid in m.processes and p.ppid != pid else None
        rank = p.ranks.get("rank")
        kids.setdefault(parent, []).append((rank if rank is not None else 1 << 62,
                                            p.start_ts if p.start_ts is not None else -1, pid))
    out: list[int] = []
    stack = sorted(kids.get(None, []), reverse=True)
    while stack:
        *_, pid = stack.pop()
        out.append(pid)
        stack.extend(sorted(kids.get(pid, []), reverse=True))
    return out


class ChromeJsonWriter:
    def __init__(self, f, model: LogModel):
        self.f = f
        self._out: _WriterThread | None = None  # from begin() to finish()
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
        self.n_switch = self.switch_bytes = 0  # TraceWriter: the text sched lines are not counted

    def _w(self, s: str) -> None:
        self._wb(s.encode())

    def _wb(self, b: bytes) -> None:
        (self._out or self.f).write(b)
        self.out_bytes += len(b)

    # -- names
    def _comm(self, tid: int) -> str:
        name = JSON_IDLE_COMM if tid == JSON_IDLE_TID else (self.m.thread_name(tid) or "<...>")
        # the line parser splits lines on newlines and args on spaces and '='
        return _jstr("".join(ch if ch.isprintable() and ch not in " =" else "_" for ch in name))

    def _head(self, tid: int) -> str:
        """The line prefix naming the current task: "comm-tid (tgid) "."""
        tgid = self.m.thread_tgid(tid) if tid not in (OUTSIDE_TID, JSON_IDLE_TID) else None
        tg = f"{tgid:5d}" if tgid is not None else "-----"
        return f"{self.comm[tid]:>16}-{tid:<7d} ({tg}) "

    # -- stream
    def begin(self) -> None:
        # Sched text streams first; traceEvents (names + family events spooled
        # by the sink) are written at the end: trace_processor accepts the
        # top-level keys in any order.
        self._out = _WriterThread(self.f)
        self._w('{"systemTraceEvents":"# tracer: nop\\n#\\n')

    def _metadata_events(self) -> list[dict]:
        m = self.m
        evs = []
        # Viewers that read Chrome's sort indexes (chrome://tracing, catapult;
        # not Perfetto's, see README) list the recorded tree depth first from
        # its roots: the recorded command, then its children (DataLoader
        # workers, torchrun's ranks...) right after it; a process' main thread
        # first; the pseudo process of system-wide tracks last.
        for rank, pid in enumerate(process_order(m)):
            evs.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": pid,
                        "args": {"sort_index": rank}})
        for tid, t in sorted(m.threads.items()):
            if t.tgid is not None:
                evs.append({"ph": "M", "name": "thread_sort_index", "pid": t.tgid, "tid": tid,
                            "args": {"sort_index": -1 if tid == t.tgid else tid}})
        for pid, p in sorted(m.processes.items()):
            name = p.name or (p.cmdline[0] if p.cmdline else None)
            label = rank_label(p.ranks)
            if label is not None:  # `rank 3 · python train.py`, sorted by rank
                cmd = [os.path.basename(p.cmdline[0]), *p.cmdline[1:]] if p.cmdline else [name or ""]
                name = f"{label} \u00b7 {' '.join(cmd)}".rstrip(" \u00b7")  # argv0's dir is noise here
            if name:
                evs.append({"ph": "M", "name": "process_name", "pid": pid, "tid": pid, "args": {"name": name}})
            if p.cmdline and not p.cmdline_is_comm:
                evs.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": pid,
                            "args": {"labels": " ".join(p.cmdline)}})
        for tid, t in sorted(m.threads.items()):
            if t.tgid is not None and t.name:
                evs.append({"ph": "M", "name": "thread_name", "pid": t.tgid, "tid": tid,
                            "args": {"name": t.name}})
        if self.sink.used_system:
            evs.append({"ph": "M", "name": "process_name", "pid": JSON_SYSTEM_PID, "tid": JSON_SYSTEM_PID,
                        "args": {"name": JSON_SYSTEM_NAME}})
            evs.append({"ph": "M", "name": "process_sort_index", "pid": JSON_SYSTEM_PID, "tid": JSON_SYSTEM_PID,
                        "args": {"sort_index": len(m.processes) + 1}})
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
        # Per line (switches then wakings of each chunk) its key columns: the
        # task it starts with and the other task, two prios (32-bit values,
        # two to a column), state or target CPU, CPU and kind.
        tids, prios, arg, kc, ts = (np.empty(n, np.int64) for _ in range(5))
        tids_u = tids.view(np.uint64)
        order = []  # per chunk, its lines in time order
        o = 0
        for c in chunks:
            ns_, nw = c.sw_ts.size, c.wk_ts.size
            if ns_:
                sl = slice(o, o + ns_)
                tids_u[sl] = (json_tids(c.sw_prev).view(np.uint64) << _U32) | json_tids(c.sw_next).view(np.uint64)
                # prev_prio: the prio the task was switched in with
                prios[o] = self._prio.get(c.cpu, DEFAULT_PRIO) * _SHIFT32 + (int(c.sw_prio[0]) & _MASK32)
                prios[o + 1: o + ns_] = c.sw_prio[:-1] * _SHIFT32 + (c.sw_prio[1:] & _MASK32)
                self._prio[c.cpu] = int(c.sw_prio[-1])
                arg[sl], ts[sl], kc[sl] = c.sw_state, c.sw_ts, c.cpu << 1
            if nw:
                sl = slice(o + ns_, o + ns_ + nw)
                tids_u[sl] = (json_tids(c.wk_waker).view(np.uint64) << _U32) | c.wk_woken.view(np.uint64)
                prios[sl] = c.wk_prio * _SHIFT32
                arg[sl], ts[sl], kc[sl] = c.wk_cpu, c.wk_ts, (c.cpu << 1) | 1
            if ns_ and nw:
                # two sorted runs: a stable sort merges them, switches first at equal times
                order.append(o + np.argsort(ts[o: o + ns_ + nw], kind="stable"))
            else:
                order.append(np.arange(o, o + ns_ + nw))
            o += ns_ + nw
        line, new_ids, new_rows = self._lines.lookup([tids, prios, arg, kc])
        for i in new_rows.tolist():
            self._add_line(int(tids_u[i]), int(prios[i]), int(arg[i]), int(kc[i]))
        if self._lines.n >= _NO_LINE:
            raise ValueError("too many distinct sched lines")
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

    def _add_line(self, tids: int, prios: int, arg: int, kc: int) -> None:
        """Text of a new distinct line (all but its timestamp), in two parts."""
        head, other = tids >> 32, tids & _MASK32
        prio_a, prio_b = prios >> 32, ((prios & _MASK32) ^ 0x80000000) - 0x80000000
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
                "drop_causes": (m.end or {}).get("drop_causes"),
                "exit_code": (m.end or {}).get("exit_code"),
                "stop_reason": (m.end or {}).get("reason"),
                "outside_thread": f"tid {OUTSIDE_TID}, named {OUTSIDE_COMM!r}: tasks outside the recorded tree "
                                  "(tid 0 is the idle task)",
            }
        }
        self._w('",\n"traceEvents":[')
        self.sink.drain_into(self._wb)
        self._w(",\n".join(orjson.dumps(e).decode() for e in self._metadata_events()) or "{}")
        frames = self.sink.stack_frames_json()
        if frames is not None:  # after the events that name them: the keys of an object come in any order
            self._wb(b'],\n"stackFrames":' + frames)
        self._w((',' if frames is not None else '],') + '\n"metadata":')
        self._w(orjson.dumps(meta).decode())
        self._w("}\n")
        out, self._out = self._out, None
        if out is not None:
            out.close()


__all__ = ["ChromeJsonWriter", "state_str"]
