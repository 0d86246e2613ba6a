"""Call stack samples in Perfetto traces: interned frames and callstacks, and two packet kinds.

Frames, function names, source paths and callstacks are interned on the
samples' packet sequence (InternedData fields 5, 18, 6, 7; one Mapping, 19,
that every frame names, since trace_processor resolves a frame's mapping).
A callstack's iid is the caller's index plus one (the caller numbers its
stacks most sampled first: 1 byte for most samples).  Frame names are
"function (file:line)": Frame.source_path_iid and line_number (fields 5, 6)
are newer than v52, so the line is in the name too and every version shows it.

- Timer samples (ThreadStackSamples): StreamingProfilePacket runs (TracePacket
  field 54) on one sequence per thread, named once by a ThreadDescriptor
  (field 44: pid, tid, reference time).  A sample is its callstack iid and its
  time since the thread's last one in microseconds of CLOCK_MONOTONIC (which
  the trace's ClockSnapshots relate to BOOTTIME): 5 bytes at 99 Hz.
  trace_processor (v52 and later) fills cpu_profile_stack_sample; the UI draws a
  "CPU Stack Samples" track per thread and a flame graph for an area.
- Stacks at calls and waits when nothing else samples, and recordings whose
  header has no MONOTONIC reading (StackSamples): PerfSample packets (field 66)
  on one sequence, a timestamp delta in nanoseconds on an incremental clock of
  the sequence (ClockSnapshot: clock 64, anchored to BOOTTIME;
  TracePacketDefaults.timestamp_clock_id makes it every packet's clock), so a
  stack keeps the exact time of its call or wait.  A repeated one: 16 bytes
  plus the pid's and tid's varints, 20-24; the least v52 attributes right:
  without the pid a sample lands on a new thread of pid 0, without the
  sequence id its stack and clock do not resolve (docs/python-stacks.md).
  trace_processor fills perf_sample.
"""
from __future__ import annotations

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ..columns import Rows
from ..interface import frame_name
from .fields import (INTERNED_IID, INTERNED_STRING, PKT_INTERNED_DATA, PKT_SEQUENCE_FLAGS, PKT_SEQUENCE_ID,
                     PKT_TIMESTAMP, SEQ_CLEARED, SEQ_NEEDS_STATE, TRACE_PACKET)
from .wire import LEN, VARINT, f_len, f_varint, key

SEQ_ID_STACKS = 5
PKT_PERF_SAMPLE = pb.TracePacket.PERF_SAMPLE_FIELD_NUMBER
PKT_CLOCK_SNAPSHOT = pb.TracePacket.CLOCK_SNAPSHOT_FIELD_NUMBER
PKT_DEFAULTS = pb.TracePacket.TRACE_PACKET_DEFAULTS_FIELD_NUMBER
_CS, _CK = pb.ClockSnapshot, pb.ClockSnapshot.Clock
CLOCK_BOOTTIME = 6            # builtin clock ids (the trace's own clock)
CLOCK_SAMPLES = 64            # sequence-scoped, incremental: time since the sequence's last packet
CLOCK_UNIT_NS = 1              # nanoseconds: a sample keeps the exact time of the call or wait it was taken at
_I = pb.InternedData
I_FUNCTION_NAMES, I_FRAMES, I_CALLSTACKS = (_I.FUNCTION_NAMES_FIELD_NUMBER, _I.FRAMES_FIELD_NUMBER,
                                            _I.CALLSTACKS_FIELD_NUMBER)
I_SOURCE_PATHS, I_MAPPINGS, I_MAPPING_PATHS = (_I.SOURCE_PATHS_FIELD_NUMBER, _I.MAPPINGS_FIELD_NUMBER,
                                               _I.MAPPING_PATHS_FIELD_NUMBER)
_F, _C, _M, _S = pb.Frame, pb.Callstack, pb.Mapping, pb.PerfSample
MAPPING_IID = 1
MAPPING_NAME = "python"


class Interner:
    """The interned names, frames and callstacks of one packet sequence."""

    def __init__(self):
        self._strings: dict[int, dict[str, int]] = {I_FUNCTION_NAMES: {}, I_SOURCE_PATHS: {}, I_MAPPING_PATHS: {}}
        self._frames: dict[tuple, int] = {}
        self._stacks: dict[tuple, int] = {}
        self._mapped = False

    def _string(self, field: int, s: str, out: bytearray) -> int:
        table = self._strings[field]
        iid = table.get(s)
        if iid is None:
            iid = table[s] = len(table) + 1
            out += f_len(field, f_varint(INTERNED_IID, iid) + f_len(INTERNED_STRING, s.encode()))
        return iid

    def _frame(self, frame: tuple, out: bytearray) -> int:
        iid = self._frames.get(frame)
        if iid is None:
            function, path, line = frame
            iid = self._frames[frame] = len(self._frames) + 1
            body = (f_varint(_F.IID_FIELD_NUMBER, iid)
                    + f_varint(_F.FUNCTION_NAME_ID_FIELD_NUMBER,
                               self._string(I_FUNCTION_NAMES, frame_name(function, path, line), out))
                    + f_varint(_F.MAPPING_ID_FIELD_NUMBER, MAPPING_IID) + f_varint(_F.REL_PC_FIELD_NUMBER, 0))
            if path:
                body += f_varint(_F.SOURCE_PATH_IID_FIELD_NUMBER, self._string(I_SOURCE_PATHS, path, out))
            if line > 0:
                body += f_varint(_F.LINE_NUMBER_FIELD_NUMBER, line)
            out += f_len(I_FRAMES, body)
        return iid

    def _callstack(self, index: int, frame_ids: tuple, out: bytearray) -> int:
        iid = self._stacks.get(frame_ids)
        if iid is None:
            # the caller's index, not the order of first use: the most sampled stacks
            # (the lowest indices) get 1-byte iids even when start-up stacks came first
            iid = self._stacks[frame_ids] = index + 1
            # Callstack.frame_ids: outermost first, one field each (not packed: pbzero reads
            # a packed run of this proto2 field as one bad id)
            out += f_len(I_CALLSTACKS, f_varint(_C.IID_FIELD_NUMBER, iid)
                         + b"".join(f_varint(_C.FRAME_IDS_FIELD_NUMBER, f) for f in frame_ids[::-1]))
        return iid

    def intern(self, stack: np.ndarray, callstacks, frames, out: bytearray) -> np.ndarray:
        """The callstack iids of `stack` (caller's stack indices), interning what is new into `out`."""
        if not self._mapped:
            path = self._string(I_MAPPING_PATHS, MAPPING_NAME, out)
            out += f_len(I_MAPPINGS, f_varint(_M.IID_FIELD_NUMBER, MAPPING_IID)
                         + f_varint(_M.PATH_STRING_IDS_FIELD_NUMBER, path))
            self._mapped = True
        used = np.unique(stack)
        iids = np.zeros(int(used.max()) + 1, np.int64)
        for s in used.tolist():
            ids = tuple(self._frame(tuple(frames[i]), out) for i in callstacks[s])
            iids[s] = self._callstack(s, ids, out)
        return iids


class StackSamples:
    """PerfSample packets on one sequence: every thread's samples at their exact times."""

    def __init__(self, write_raw, write_framed=None):
        self._write, self._write_framed = write_raw, write_framed
        self._names = Interner()
        self._first = True
        self._tail = f_varint(PKT_SEQUENCE_ID, SEQ_ID_STACKS)
        self._clock: int | None = None  # the incremental clock's value after the last sample written

    def write(self, ts, tid, pid, stack, callstacks, frames) -> None:
        ts, tid, pid, stack = (np.asarray(a).astype(np.int64, copy=False) for a in (ts, tid, pid, stack))
        if not ts.size:
            return
        interned = bytearray()
        iids = self._names.intern(stack, callstacks, frames, interned)
        head = f_len(PKT_INTERNED_DATA, bytes(interned)) if interned else b""
        flags = SEQ_CLEARED if self._first else SEQ_NEEDS_STATE
        if self._first:  # every packet of the sequence is timed on the incremental clock
            head += f_len(PKT_DEFAULTS, f_varint(pb.TracePacketDefaults.TIMESTAMP_CLOCK_ID_FIELD_NUMBER, CLOCK_SAMPLES))
        self._write(head + f_varint(PKT_SEQUENCE_ID, SEQ_ID_STACKS) + f_varint(PKT_SEQUENCE_FLAGS, flags))
        self._first = False
        order = np.argsort(ts, kind="stable")  # deltas are unsigned: in time order
        ts, tid, pid, stack = ts[order], tid[order], pid[order], stack[order]
        ticks = ts // CLOCK_UNIT_NS
        if self._clock is None or ticks[0] < self._clock:  # (re)anchor the clock at this batch's first sample
            self._clock = int(ticks[0])
            self._write(f_len(PKT_CLOCK_SNAPSHOT, f_len(_CS.CLOCKS_FIELD_NUMBER,
                                                          f_varint(_CK.CLOCK_ID_FIELD_NUMBER, CLOCK_BOOTTIME)
                                                          + f_varint(_CK.TIMESTAMP_FIELD_NUMBER,
                                                                     self._clock * CLOCK_UNIT_NS))
                              + f_len(_CS.CLOCKS_FIELD_NUMBER,
                                      f_varint(_CK.CLOCK_ID_FIELD_NUMBER, CLOCK_SAMPLES)
                                      + f_varint(_CK.TIMESTAMP_FIELD_NUMBER, self._clock)
                                      + f_varint(_CK.IS_INCREMENTAL_FIELD_NUMBER, 1)
                                      + f_varint(_CK.UNIT_MULTIPLIER_NS_FIELD_NUMBER, CLOCK_UNIT_NS)))
                        + self._tail)
        delta = np.diff(ticks, prepend=self._clock)
        self._clock = int(ticks[-1])
        n = ts.size
        body = (Rows(n).const(key(_S.PID_FIELD_NUMBER, VARINT)).varint(pid)
                .const(key(_S.TID_FIELD_NUMBER, VARINT)).varint(tid)
                .const(key(_S.CALLSTACK_IID_FIELD_NUMBER, VARINT)).varint(iids[stack]))
        pkt = (Rows(n).const(key(PKT_TIMESTAMP, VARINT)).varint(delta)
               .const(key(PKT_PERF_SAMPLE, LEN)).varint(body.total()).extend(body).const(self._tail))
        framed = Rows(n).const(key(TRACE_PACKET, LEN)).varint(pkt.total()).extend(pkt).build()
        if self._write_framed is not None:
            self._write_framed(framed)
        else:  # one packet at a time through write_raw: strip the framing again
            for t, p, th, s in zip(delta.tolist(), pid.tolist(), tid.tolist(), iids[stack].tolist()):
                b = (f_varint(_S.PID_FIELD_NUMBER, p) + f_varint(_S.TID_FIELD_NUMBER, th)
                     + f_varint(_S.CALLSTACK_IID_FIELD_NUMBER, s))
                self._write(f_varint(PKT_TIMESTAMP, t) + f_len(PKT_PERF_SAMPLE, b) + self._tail)


SEQ_ID_THREAD_SAMPLES = 1024   # the first per-thread sample sequence (merge: ids stay below 65536)
MAX_THREAD_SEQUENCES = 60000
_TD, _SP = pb.ThreadDescriptor, pb.StreamingProfilePacket
PKT_THREAD_DESCRIPTOR = pb.TracePacket.THREAD_DESCRIPTOR_FIELD_NUMBER
PKT_STREAMING_PROFILE = pb.TracePacket.STREAMING_PROFILE_PACKET_FIELD_NUMBER


class _ThreadSequence:
    def __init__(self, seq_id: int):
        self.tail = f_varint(PKT_SEQUENCE_ID, seq_id)
        self.names = Interner()
        self.clock_us: int | None = None  # the sequence's time after the last sample written (MONOTONIC us)
        self.last_us = 0                  # the last sample's time, written or waiting
        self.iids: list[np.ndarray] = []  # samples waiting for a packet
        self.times: list[np.ndarray] = []
        self.waiting = 0


class ThreadStackSamples:
    """Timer samples as StreamingProfilePacket runs, one packet sequence per thread.

    A sample costs its callstack iid and its time since the thread's last
    sample in microseconds (two fields: 5-6 bytes for a repeated stack at
    99 Hz, against 20-24 for a PerfSample, which repeats its pid, tid,
    sequence id and framing every time).  The thread is named once, by the
    sequence's ThreadDescriptor (pid, tid, reference time), and a packet
    carries up to PACKET_SAMPLES samples.  trace_processor fills
    cpu_profile_stack_sample from them, converting the sequence's time from
    CLOCK_MONOTONIC (the header's BOOTTIME - MONOTONIC gives it).  Microseconds
    are plenty for a 10 ms timer; the stacks taken at calls and waits keep
    PerfSample packets and their exact nanoseconds."""

    PACKET_SAMPLES = 1024

    def __init__(self, write_raw, mono_offset_ns: int):
        self._write = write_raw
        self._off = int(mono_offset_ns)  # BOOTTIME - MONOTONIC
        self._seqs: dict[tuple[int, int], _ThreadSequence] = {}

    def has_room(self, n_threads: int) -> bool:
        return len(self._seqs) + n_threads <= MAX_THREAD_SEQUENCES

    def write(self, ts, tid, pid, stack, callstacks, frames) -> None:
        ts, tid, pid, stack = (np.asarray(a).astype(np.int64, copy=False) for a in (ts, tid, pid, stack))
        if not ts.size:
            return
        order = np.lexsort((ts, tid, pid))
        ts, tid, pid, stack = ts[order], tid[order], pid[order], stack[order]
        us = (ts - self._off) // 1000
        cut = np.flatnonzero((pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])) + 1
        for lo, hi in zip([0, *cut.tolist()], [*cut.tolist(), ts.size]):
            key_ = (int(pid[lo]), int(tid[lo]))
            seq = self._seqs.get(key_)
            if seq is None:
                seq = self._seqs[key_] = _ThreadSequence(SEQ_ID_THREAD_SAMPLES + len(self._seqs))
            interned = bytearray()
            iids = seq.names.intern(stack[lo:hi], callstacks, frames, interned)
            t = us[lo:hi]
            head = f_len(PKT_INTERNED_DATA, bytes(interned)) if interned else b""
            if seq.clock_us is None or t[0] < seq.last_us:  # (re)start the sequence's time here
                self._flush(seq)
                flags = SEQ_CLEARED if seq.clock_us is None else SEQ_NEEDS_STATE
                seq.clock_us = int(t[0])
                # timestamped (BOOTTIME, its first sample's): trace_processor files the thread
                # there; without one it takes the latest time read so far, which can be past a
                # DataLoader worker's exit, and a second, ghost copy of the process appears
                head += f_varint(PKT_TIMESTAMP, int(ts[lo]))
                head += f_len(PKT_THREAD_DESCRIPTOR, f_varint(_TD.PID_FIELD_NUMBER, key_[0])
                              + f_varint(_TD.TID_FIELD_NUMBER, key_[1])
                              + f_varint(_TD.REFERENCE_TIMESTAMP_US_FIELD_NUMBER, seq.clock_us))
                self._write(head + seq.tail + f_varint(PKT_SEQUENCE_FLAGS, flags))
            elif head:  # names before the samples that use them
                self._write(head + seq.tail + f_varint(PKT_SEQUENCE_FLAGS, SEQ_NEEDS_STATE))
            seq.iids.append(iids[stack[lo:hi]])
            seq.times.append(t)
            seq.waiting += t.size
            seq.last_us = int(t[-1])
            if seq.waiting >= self.PACKET_SAMPLES:
                self._flush(seq)

    def _flush(self, seq: _ThreadSequence) -> None:
        if not seq.waiting:
            return
        iids, t = np.concatenate(seq.iids), np.concatenate(seq.times)
        seq.iids, seq.times, seq.waiting = [], [], 0
        delta = np.diff(t, prepend=seq.clock_us)
        seq.clock_us = int(t[-1])
        tail = seq.tail + f_varint(PKT_SEQUENCE_FLAGS, SEQ_NEEDS_STATE)
        for lo in range(0, t.size, self.PACKET_SAMPLES):  # packets of a few KiB, however long the batch
            hi = min(lo + self.PACKET_SAMPLES, t.size)
            # one field per value: both are unpacked proto2 repeated fields, which pbzero
            # reads a packed run of as one bad value
            body = (Rows(hi - lo).const(key(_SP.CALLSTACK_IID_FIELD_NUMBER, VARINT)).varint(iids[lo:hi])
                    .const(key(_SP.TIMESTAMP_DELTA_US_FIELD_NUMBER, VARINT)).varint(delta[lo:hi]).build())
            self._write(f_len(PKT_STREAMING_PROFILE, body) + tail)

    def finish(self) -> None:
        for seq in self._seqs.values():
            self._flush(seq)
