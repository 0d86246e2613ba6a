"""Raw log -> Perfetto protobuf trace, written packet by packet.

A Trace is `repeated TracePacket packet = 1`, so each packet goes out as
0x0a varint(len) bytes the moment it is ready; memory stays bounded by one
raw block.  The packets written by the million (compact sched here, the
families' TrackEvents in sink.py) are encoded by hand (wire.py), with the
proto's field numbers (fields.py); the rest are perfetto_trace_pb2 messages.

What goes in, and what trace_processor (v52, checked by tests/unit/test_converters.py)
makes of it:
- clock_snapshot (BOOTTIME/REALTIME/MONOTONIC from the header, again from the
  END block): timestamps stay BOOTTIME, the UI can show wall time.
- system_info.utsname: prev_state bits are decoded by kernel version; without
  it every state reads wrong.
- sched switches and wakings as FtraceEventBundle.compact_sched, one bundle per
  CPU per raw block.  The hot arrays are varint-packed with numpy here, not
  through protobuf objects.  trace_processor drops the first compact switch of
  each CPU (stat compact_sched_switch_skipped), hence the leading synthetic
  switch SchedNormalizer adds.  Fills sched, thread_state (Running, R, R+, S,
  D, ...), thread.
- fork: task_newtask (common pid = parent, clone_flags with CLONE_THREAD for a
  thread).  trace_processor starts a new thread (thread.start_ts, an R state
  woken by the parent), and for a non-thread fork a new process
  (process.start_ts) whose parent is the forking process.
- rename: task_rename -> thread name (and process name for a main thread).
- exec: sched_process_exec (kept for the raw/ftrace_event table) plus a
  task_rename to the new comm, which is what actually renames the thread.
- exit: sched_process_exit at the exit time, sched_process_free 1 ns after the
  thread's final switch-out (or at the exit time, none known).  Only
  sched_process_free ends a thread (thread.end_ts, and process.end_ts for a
  main thread); sched_process_exit alone just lands in ftrace_event.
- process_tree (cmdline, ppid, tid -> tgid, thread names): one packet per
  "procs" snapshot, one 1 ns after each process fork/exec (cmdline as of
  then), one at the end for what is still alive.  trace_processor binds an
  entry to the latest process/thread with that pid/tid and starts a *new* one
  when that has ended, so entries must come after the fork that created the
  process and before its exit.  Thread names given here outrank ftrace names,
  so they, like the compact_sched comms, are each thread's final name (last
  rename/exec); the names over time stay in the task_rename events' args.
- drops: ftrace_stats START_OF_TRACE (zeros) and END_OF_TRACE with per-CPU
  `dropped_events` = records lost on that CPU in all rings and `overrun` =
  those lost to a full ring -> stats ftrace_cpu_dropped_events_delta and
  ftrace_cpu_overrun_end / _delta (severity "error", so the UI flags the
  trace).  Per ring, a counter track "timeline: <ring> records dropped" (0 at
  the start, the total at the end) makes the loss queryable by ring name; a
  ring whose records the kernel refused with room left (not a full ring) gets
  "timeline: <ring> records refused by the kernel (ring not full)" too.
"""
from __future__ import annotations

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ... import __version__, proc_records
from ... import events as ev
from ..model import CpuSched, LogModel
from ...ranks import RANK_VARS, rank_label
from .fields import (
    BUNDLE_COMPACT_SCHED, BUNDLE_CPU, CS_INTERN_TABLE, CS_SWITCH_NEXT_COMM_INDEX, CS_SWITCH_NEXT_PID,
    CS_SWITCH_NEXT_PRIO, CS_SWITCH_PREV_STATE, CS_SWITCH_TIMESTAMP, CS_WAKING_COMM_INDEX, CS_WAKING_COMMON_FLAGS,
    CS_WAKING_PID, CS_WAKING_PRIO, CS_WAKING_TARGET_CPU, CS_WAKING_TIMESTAMP, PKT_FTRACE_EVENTS, PKT_SEQUENCE_ID,
    TRACE_PACKET)
from .sink import PerfettoTrackSink
from .wire import LEN, f_len, f_packed, f_varint, key, varint

SEQ_ID = 1
SEQ_ID_COUNTERS = 2
MAX_BUNDLE = 65536          # events per compact_sched bundle
CLONE_VM = 0x100
CLONE_SIGHAND = 0x800
CLONE_THREAD = 0x10000
SIGCHLD = 17
CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME = 1, 3, 6
_PACKET_KEY = key(TRACE_PACKET, LEN)  # each packet's framing as a Trace.packet field


# ------------------------------------------------------------------ writer

class PerfettoWriter:
    def __init__(self, f, model: LogModel, window=None):
        self.f = f
        self.m = model
        # one chunk of a trace set (trace_set.ChunkWindow): its own time range, the
        # processes alive at its start named there, drop stats in the last chunk only
        self.window = window
        self.out_bytes = 0
        self.switch_bytes = 0  # compact_sched switch arrays only (bytes/switch metric)
        self.n_switch = 0
        self._early_leaders: dict[int, str] = {}  # tgid -> comm, freed at group death
        # Families (CUDA, I/O, counters...) write TrackEvents through this.
        self.sink = PerfettoTrackSink(self._raw_packet, model.thread_tgid, write_framed=self._framed,
                                      lifetime=model.lifetime)
        clock = model.header.get("clock") or {}
        if isinstance(clock.get("boottime_ns"), int) and isinstance(clock.get("monotonic_ns"), int):
            self.sink.mono_offset_ns = clock["boottime_ns"] - clock["monotonic_ns"]

    # -- framing
    def _raw_packet(self, body: bytes) -> None:
        data = _PACKET_KEY + varint(len(body)) + body
        self.f.write(data)
        self.out_bytes += len(data)

    def _framed(self, data: bytes) -> None:
        """Packets already framed as Trace.packet fields (the sink's bulk writes)."""
        self.f.write(data)
        self.out_bytes += len(data)

    def _packet(self, pkt: pb.TracePacket, seq: int = SEQ_ID) -> None:
        pkt.trusted_packet_sequence_id = seq
        self._raw_packet(pkt.SerializeToString())

    # -- preamble
    def begin(self) -> None:
        m = self.m
        self._clock_snapshot(m.header.get("clock") or {}, first=True)
        uts = m.header.get("uname") or {}
        si = pb.TracePacket()
        for k in ("sysname", "release", "version", "machine"):
            if uts.get(k):
                setattr(si.system_info.utsname, k, str(uts[k]))
        si.system_info.num_cpus = m.ncpu()
        self._packet(si)
        # the host: `timeline merge` names each input's machine by it
        w = self.window
        chunk = {} if w is None else {"timeline_chunk": w.index + 1, "timeline_chunks": w.count}
        self._metadata({"timeline_version": __version__, **({"timeline_host": str(uts["nodename"])}
                                                            if uts.get("nodename") else {}), **chunk})
        start = m.start_ts() if w is None or w.index == 0 else w.start
        if m.end is not None and self._has_drop_stats():
            self._ftrace_stats(pb.FtraceStats.START_OF_TRACE, start, {}, {})
            self._drop_counters(start, start=True)
        if w is not None and w.index > 0:  # a chunk begins with what is alive then, named
            self._process_tree(w.start, *self._alive(w.start, w.start))

    def _has_drop_stats(self) -> bool:
        return self.window is None or self.window.index == self.window.count - 1

    def _alive(self, lo: int, hi: int) -> tuple[list, list]:
        """The pids and tids alive at some time in [lo, hi] (known to have begun by hi, not ended before lo)."""
        def alive(x) -> bool:
            return (x.start_ts is None or x.start_ts <= hi) and (x.end_ts is None or x.end_ts > lo)
        return (sorted(p.pid for p in self.m.processes.values() if alive(p)),
                sorted(t.tid for t in self.m.threads.values() if t.tgid is not None and alive(t)))

    def _clock_snapshot(self, clock: dict, first: bool = False) -> None:
        ids = (("boottime_ns", CLOCK_BOOTTIME), ("realtime_ns", CLOCK_REALTIME),
               ("monotonic_ns", CLOCK_MONOTONIC))
        if clock.get("boottime_ns") is None:
            return
        pkt = pb.TracePacket()
        for name, cid in ids:
            if clock.get(name) is not None:
                pkt.clock_snapshot.clocks.add(clock_id=cid, timestamp=int(clock[name]))
        if first:
            pkt.clock_snapshot.primary_trace_clock = CLOCK_BOOTTIME
        self._packet(pkt)

    def _ftrace_stats(self, phase: int, ts: int, lost: dict, overrun: dict) -> None:
        pkt = pb.TracePacket(timestamp=ts)
        pkt.ftrace_stats.phase = phase
        for cpu in range(self.m.ncpu()):
            pkt.ftrace_stats.cpu_stats.add(cpu=cpu, overrun=int(overrun.get(cpu, 0)),
                                           dropped_events=int(lost.get(cpu, 0)))
        self._packet(pkt)

    def _drop_counters(self, ts: int, start: bool) -> None:
        tracks = [(f"timeline: {ring} records dropped", n) for ring, n in sorted(self.m.drops.items())]
        # Refusals are part of the drops above; their own track says the ring was not full.
        tracks += [(f"timeline: {ring} records refused by the kernel (ring not full)", n)
                   for ring, (n, _, _) in sorted(self.m.refused.items())]
        for i, (name, n) in enumerate(tracks):
            uuid = 0x71DE_0000 + i
            if start:
                d = pb.TracePacket()
                d.track_descriptor.uuid = uuid
                d.track_descriptor.name = name
                d.track_descriptor.counter.SetInParent()
                if i == 0:
                    d.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
                self._packet(d, SEQ_ID_COUNTERS)
            c = pb.TracePacket(timestamp=ts)
            c.track_event.type = pb.TrackEvent.TYPE_COUNTER
            c.track_event.track_uuid = uuid
            c.track_event.counter_value = 0 if start else n
            self._packet(c, SEQ_ID_COUNTERS)

    # -- sched
    def sched(self, chunks: list[CpuSched]) -> None:
        for c in chunks:
            nsw, nwk = c.sw_ts.size, c.wk_ts.size
            for s in range(0, max(nsw, nwk), MAX_BUNDLE):
                self._compact_bundle(c, slice(s, s + MAX_BUNDLE))

    def _compact_bundle(self, c: CpuSched, sl: slice) -> None:
        sw_next, wk_woken = c.sw_next[sl], c.wk_woken[sl]
        if sw_next.size == 0 and wk_woken.size == 0:
            return
        tids, inv = np.unique(np.concatenate([sw_next, wk_woken]), return_inverse=True)
        names: dict[str, int] = {}
        tid_name = np.array([names.setdefault(self.m.thread_name(t), len(names))
                             for t in tids.tolist()], dtype=np.int64)
        comm_idx = tid_name[inv]
        parts = [f_len(CS_INTERN_TABLE, n.encode("utf-8", "replace")) for n in names]
        if sw_next.size:
            sw = [f_packed(CS_SWITCH_TIMESTAMP, np.diff(c.sw_ts[sl], prepend=0)),
                  f_packed(CS_SWITCH_PREV_STATE, c.sw_state[sl]),
                  f_packed(CS_SWITCH_NEXT_PID, sw_next),
                  f_packed(CS_SWITCH_NEXT_PRIO, c.sw_prio[sl]),
                  f_packed(CS_SWITCH_NEXT_COMM_INDEX, comm_idx[: sw_next.size])]
            self.switch_bytes += sum(map(len, sw))
            self.n_switch += sw_next.size
            parts += sw
        if wk_woken.size:
            parts += [f_packed(CS_WAKING_TIMESTAMP, np.diff(c.wk_ts[sl], prepend=0)),
                      f_packed(CS_WAKING_PID, wk_woken),
                      f_packed(CS_WAKING_TARGET_CPU, c.wk_cpu[sl]),
                      f_packed(CS_WAKING_PRIO, c.wk_prio[sl]),
                      f_packed(CS_WAKING_COMM_INDEX, comm_idx[sw_next.size:]),
                      f_packed(CS_WAKING_COMMON_FLAGS, np.zeros(wk_woken.size, np.int64))]
        bundle = f_varint(BUNDLE_CPU, c.cpu) + f_len(BUNDLE_COMPACT_SCHED, b"".join(parts))
        self._raw_packet(f_len(PKT_FTRACE_EVENTS, bundle) + f_varint(PKT_SEQUENCE_ID, SEQ_ID))

    # -- proc
    def proc(self, recs: np.ndarray) -> None:
        """recs: PROC_EVENT records sorted by (cpu, ts)."""
        pkt = bundle = None
        cur_cpu = None
        for r in recs:
            cpu = int(r["cpu"])
            if cpu != cur_cpu:
                if pkt is not None:
                    self._packet(pkt)
                pkt = pb.TracePacket()
                bundle = pkt.ftrace_events
                bundle.cpu = cur_cpu = cpu
            self._proc_event(bundle, r)
        if pkt is not None:
            self._packet(pkt)
        # A process's cmdline goes in 1 ns after its fork/exec: trace_processor
        # creates the process at task_newtask, and a process_tree entry that
        # sorted before it would land on the previous holder of the pid.
        new = (recs["kind"] == proc_records.PROC_EXEC) | (
            (recs["kind"] == proc_records.PROC_FORK) & (recs["child_tid"] == recs["child_tgid"])
            & ((recs["flags"] & proc_records.PF_THREAD) == 0))
        for r in recs[new]:
            pid = int(r["child_tgid"] if r["kind"] == proc_records.PROC_FORK else r["tgid"])
            self._process_tree(int(r["ts"]) + 1, [pid], [])

    def _proc_event(self, bundle, r) -> None:
        ts, kind, flags = int(r["ts"]), int(r["kind"]), int(r["flags"])
        tid, tgid = int(r["tid"]), int(r["tgid"])
        comm = ev.cstr(r["comm"])
        if kind == proc_records.PROC_FORK:
            e = bundle.event.add(timestamp=ts, pid=tid)
            e.task_newtask.pid = int(r["child_tid"])
            e.task_newtask.comm = comm
            thread = flags & proc_records.PF_THREAD or r["child_tid"] != r["child_tgid"]
            e.task_newtask.clone_flags = (CLONE_THREAD | CLONE_VM | CLONE_SIGHAND) if thread else SIGCHLD
        elif kind == proc_records.PROC_EXEC:
            argv = proc_records.argv_of(r)
            e = bundle.event.add(timestamp=ts, pid=tid)
            e.sched_process_exec.filename = argv[0] if argv else comm
            e.sched_process_exec.pid = tid
            e.sched_process_exec.old_pid = int(r["child_tid"]) or tid
            e = bundle.event.add(timestamp=ts, pid=tid)
            e.task_rename.pid = tid
            t = self.m.threads.get(tid)
            old = t.name_at(ts - 1) if t else None
            if old:
                e.task_rename.oldcomm = old
            e.task_rename.newcomm = comm
        elif kind == proc_records.PROC_EXIT:
            e = bundle.event.add(timestamp=ts, pid=tid)
            e.sched_process_exit.pid = tid
            e.sched_process_exit.tgid = tgid
            e.sched_process_exit.comm = comm
            e.sched_process_exit.prio = 120
            # Freeing the leader ends the whole process in trace_processor,
            # so a leader that exits before its other threads is freed only
            # when the group dies (it stays a zombie until then anyway).
            # A thread is freed at its final switch-out, which can come well
            # after the exit tracepoint (teardown of mm, files...): 1 ns after it, as
            # trace_processor orders equal times as it likes, and a free before
            # that switch made the switch start a second, ghost copy of the thread.
            th = self.m.threads.get(tid)
            free_ts = max(ts, th.end_ts + 1) if th is not None and th.end_ts is not None else ts
            if tid == tgid and not flags & proc_records.PF_GROUP_DEAD:
                self._early_leaders[tgid] = comm
            else:
                self._free(bundle, free_ts, tid, comm)
            if flags & proc_records.PF_GROUP_DEAD and tgid in self._early_leaders:
                self._free(bundle, free_ts, tgid, self._early_leaders.pop(tgid))
        elif kind == proc_records.PROC_RENAME:
            e = bundle.event.add(timestamp=ts, pid=tid)
            e.task_rename.pid = tid
            e.task_rename.oldcomm = ev.cstr(r["old_comm"])
            e.task_rename.newcomm = comm

    @staticmethod
    def _free(bundle, ts: int, tid: int, comm: str) -> None:
        e = bundle.event.add(timestamp=ts, pid=tid)
        e.sched_process_free.pid = tid
        e.sched_process_free.comm = comm
        e.sched_process_free.prio = 120

    # -- process tree
    def snapshot(self, meta: dict) -> None:
        pids = [int(p["pid"]) for p in meta.get("processes") or []]
        tids = [int(t["tid"]) for p in meta.get("processes") or []
                for t in (p.get("threads") or [{"tid": p["pid"]}])]
        self._process_tree(int(meta.get("ts") or self.m.start_ts()), pids, tids)

    def _process_tree(self, ts: int, pids, tids, final: bool = False) -> None:
        pkt = pb.TracePacket(timestamp=ts)
        tree = pkt.process_tree
        for pid in pids:
            p = self.m.processes.get(pid)
            if p is None:
                continue
            pp = tree.processes.add(pid=pid)
            if p.ppid is not None:
                pp.ppid = p.ppid
            cmd, is_comm = (p.cmdline, p.cmdline_is_comm) if final else p.cmdline_at(ts)
            if not cmd and p.name:
                cmd, is_comm = [p.name], True
            pp.cmdline.extend(cmd)
            if is_comm:
                pp.cmdline_is_comm = True
        for tid in tids:
            t = self.m.threads.get(tid)
            if t is None or t.tgid is None:
                continue
            th = tree.threads.add(tid=tid, tgid=t.tgid)
            if t.name:
                th.name = t.name
        self._packet(pkt)

    def _rank_labels(self, end: int, lo: int | None = None) -> None:
        """Ranks as process args (`chrome.process_label[i]` = `rank=3`, ...),
        through a process descriptor inside the process's lifetime.
        trace_processor keeps the cmdline's name over the descriptor's, so the
        name only shows where no cmdline was known."""
        for pid, p in sorted(self.m.processes.items()):
            label = rank_label(p.ranks)
            if label is None:
                continue
            last = max([t for t, _, _ in p.history if t is not None] + [p.start_ts or 0, self.m.start_ts()])
            ts = min(last + 2, p.end_ts if p.end_ts is not None else end)
            if lo is not None:  # a chunk: only processes alive in it, labelled inside it
                if (p.end_ts is not None and p.end_ts <= lo) or (p.start_ts is not None and p.start_ts > end):
                    continue
                ts = max(ts, lo + 2)
            pkt = pb.TracePacket(timestamp=ts)
            # the uuid of the process's own track (the sink's): a second process
            # descriptor with another uuid makes trace_processor start a ghost process
            pkt.track_descriptor.uuid = self.sink._process_track(pid, pkt.timestamp)
            d = pkt.track_descriptor.process
            d.pid = pid
            d.process_name = label
            d.process_labels.extend(f"{k}={p.ranks[k]}" for k in RANK_VARS if k in p.ranks)  # rank first
            # on the sequence of the other process/thread descriptors: on the sched
            # sequence trace_processor would bind it to a second, ghost process
            self.sink._pb_packet(pkt, threads=True)

    # -- end
    def finish(self) -> None:
        self.sink.finish()  # what the families' writes left waiting
        m = self.m
        w = self.window
        end = m.end_ts() if w is None or w.index == w.count - 1 else w.end
        # Only what is still alive: trace_processor would start a second
        # thread/process for an ended one.
        if w is None:
            live = [t.tid for t in m.threads.values() if t.end_ts is None and t.tgid is not None]
            procs = [p.pid for p in m.processes.values() if p.end_ts is None]
        else:
            procs, live = self._alive(end, end)
        self._process_tree(end, sorted(procs), sorted(live), final=self._has_drop_stats())  # not the last chunk: as then
        self._rank_labels(end, None if w is None else w.start)
        if m.end is not None and self._has_drop_stats():
            self._ftrace_stats(pb.FtraceStats.END_OF_TRACE, end, m.drops_per_cpu(), m.drops_per_cpu("full"))
            self._drop_counters(end, start=False)
            ce = m.end.get("clock_end") or {}
            if all(ce.get(k) is not None for k in ("boottime_ns", "realtime_ns")):
                self._clock_snapshot(ce)
        # Last packet: a trace that lacks it was cut short (timeline check and
        # query say so); the counts let a reader verify what it loaded.
        hints = {} if m.command_pid is None else {"timeline_command_pid": m.command_pid}  # for `timeline view`
        self._metadata({**hints, "timeline_switches": self.n_switch,
                        "timeline_recording_finalized": int(m.end is not None),
                        "timeline_dropped": int(sum(m.drops.values())),
                        "timeline_trace_complete": 1})

    def _metadata(self, values: dict) -> None:
        """Key/values trace_processor files under metadata as cr-<key> (the
        ChromeEventBundle metadata path): seen by SQL, not drawn as tracks."""
        pkt = pb.TracePacket()
        for k, v in values.items():
            e = pkt.chrome_events.metadata.add(name=k)
            if isinstance(v, str):
                e.string_value = v
            else:
                e.int_value = int(v)
        self._packet(pkt)
