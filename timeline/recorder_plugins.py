"""Hooks for event families that need user-space work while recording.

Most families are BPF programs attached by their SEC() and need nothing
here.  Some need more: CUDA probes find libraries and attach uprobes to
them (and keep looking as new ones are mapped); samplers read NVML or /proc
on a timer.  Such a family provides a RecorderPlugin, named by its descriptor
(timeline/family.py: Family.plugin).  A family whose records do not come from
BPF at all writes them from its plugin (RecorderContext.write_ring).

Threading: `before_launch`, `on_target` and `stop` run on the main thread,
`tick` on the consumer thread after each drain.  Anything written to the raw
log goes through the context, which serialises writers.

The context also knows the recorded processes (`ctx.processes`), kept
current from the proc ring's fork/exec/exit records as they are drained, so
plugins need not list /proc or walk the tracked map to find them.
"""
from __future__ import annotations

import struct
import threading
import time

import numpy as np

from . import events, proc_records
from .family import load_spec
from .rawlog import RawLogWriter
from .registry import FAMILIES, RING_DTYPES, options_of

RECONCILE_S = 2.0  # s between looks at the proc ring's drop count (see reconcile_processes)



class RecorderContext:
    def __init__(self, cfg, session, writer: RawLogWriter, lock: threading.Lock):
        self.cfg = cfg
        self.session = session        # BpfSession: objects, tracked map
        self._writer = writer
        self._lock = lock
        self.target_pids: list[int] = []  # launched pid, or the attached tree's pids
        self.summary: list[str] = []      # lines for the end-of-recording summary
        # Live recorded processes: tgid -> generation, a number that changes
        # when the process is born or execs (a new image: its mappings and
        # /proc files are worth a fresh look).  Replaced, never mutated, so
        # other threads can read it without a lock.
        self.processes: dict[int, int] = {}
        self._gen = 0
        self._ended: set[int] = set()  # exited: not to be re-added by a late add_processes
        self._plock = threading.Lock()
        self._reconcile_at = time.monotonic() + RECONCILE_S
        self._proc_lost = 0
        # (tgid, wait status) of processes that died from a signal or exited non-zero (--ring dumps them)
        self.failed_exits: list[tuple[int, int]] = []
        # What holds the capture window (--delay, SIGUSR1): records a plugin
        # writes pass through it like drained ones.  Set by the recorder.
        self.window_holder = None

    @staticmethod
    def now_ns() -> int:
        """The trace clock (BOOTTIME), for samples taken in user space."""
        return time.clock_gettime_ns(time.CLOCK_BOOTTIME)

    def write_meta(self, obj: dict) -> None:
        with self._lock:
            self._writer.write_meta(obj)

    def write_ring(self, ring: int, data: bytes) -> None:
        """Records produced in user space, laid out like a BPF ring (see
        events.encode_ring_bytes), under a ring id of the family's own."""
        with self._lock:
            window = getattr(self.window_holder, "window", None)
            if window is not None:
                data = window.keep(ring, data, events.ring_stride(RING_DTYPES[ring]))
                if not data:
                    return
            self._writer.write_ring(ring, data)

    # -- recorded processes -----------------------------------------------
    def add_processes(self, pids) -> None:
        """Processes known other than from fork records (the launched target,
        an attached tree)."""
        with self._plock:
            new = {p for p in pids if p not in self.processes and p not in self._ended}
            if new:
                procs = dict(self.processes)
                for p in sorted(new):
                    self._gen += 1
                    procs[p] = self._gen
                self.processes = procs

    def note_drained(self, ring: int, data: bytes, stride: int) -> None:
        """Consumer thread: records just drained from a ring (headers included)."""
        if ring == proc_records.RING_PROC:
            self.note_proc_records(data, stride)

    def note_proc_records(self, data: bytes, stride: int) -> None:
        """Consumer thread: proc ring records just drained (headers included)."""
        n = len(data) // stride
        if not n:
            return
        rec = np.ndarray((n,), proc_records.PROC_EVENT, buffer=data, offset=events.RINGBUF_HDR, strides=(stride,))
        kind, flags = rec["kind"], rec["flags"]
        keep = (((kind == proc_records.PROC_FORK) & (flags & proc_records.PF_THREAD == 0))
                | (kind == proc_records.PROC_EXEC)
                | ((kind == proc_records.PROC_EXIT) & (flags & proc_records.PF_GROUP_DEAD != 0)))
        if not keep.any():
            return  # thread forks/exits, renames: the set of processes is unchanged
        with self._plock:
            procs = dict(self.processes)
            for k, tgid, child, code in rec[["kind", "tgid", "child_tgid", "exit_code"]][keep].tolist():
                if k == proc_records.PROC_EXIT:  # few: forks, execs, process exits
                    procs.pop(tgid, None)
                    self._ended.add(tgid)
                    if code:
                        self.failed_exits.append((tgid, code))
                    continue
                pid = child if k == proc_records.PROC_FORK else tgid
                self._gen += 1
                procs[pid] = self._gen
                self._ended.discard(pid)  # a pid used again
            self.processes = procs

    def reconcile_processes(self) -> None:
        """Consumer thread: once proc records were lost to a full ring, match
        ctx.processes against the tracked map, the source of truth.  Without
        such losses every change of the set came as a record: the map (one
        entry per thread, two syscalls each) is not walked."""
        now = time.monotonic()
        if now < self._reconcile_at:
            return
        self._reconcile_at = now + RECONCILE_S
        lost = sum(self.session.drops().get("proc", ()))
        if lost == self._proc_lost:
            return
        self._proc_lost = lost
        tracked = {struct.unpack_from("<I", v)[0] for _, v in self.session.tracked.items()}
        with self._plock:
            if tracked == set(self.processes):
                return
            procs = {p: g for p, g in self.processes.items() if p in tracked}
            for p in sorted(tracked - set(procs)):
                self._gen += 1
                procs[p] = self._gen
            self.processes = procs


class PeriodicSampler:
    """Calls `sample(ctx)` every `interval` seconds on a daemon thread of its
    own, from start() until stop().  An exception ends the thread and is kept
    in `error`, for the family's summary: recording goes on without it."""

    def __init__(self, name: str, interval: float, sample):
        self.name, self.interval, self._sample = name, interval, sample
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, ctx) -> None:
        self._thread = threading.Thread(target=self._run, args=(ctx,), name=self.name, daemon=True)
        self._thread.start()

    def _run(self, ctx) -> None:
        try:
            while True:
                self._sample(ctx)
                if self._stop.wait(self.interval):
                    return
        except BaseException as e:  # reported at stop; recording goes on
            self.error = e

    def stop(self) -> None:
        """Ends the thread and waits for it (a sample under way finishes first)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()


class RecorderPlugin:
    family = ""

    def __init__(self, cfg, options=None):
        self.cfg = cfg
        self.options = options  # the family's options dataclass (Family.options), defaults filled in

    def preflight(self) -> None:
        """Checks before anything is loaded; raise errors.UserError."""

    def header(self) -> dict:
        """Extra fields for the raw log header."""
        return {}

    def rodata(self) -> dict[str, int]:
        """Values of the family's BPF `const volatile` globals, set before load."""
        return {}

    def before_launch(self, ctx: RecorderContext) -> None:
        """BPF is loaded and attached; the target has not started yet."""

    def launch_env(self, ctx: RecorderContext) -> dict[str, str]:
        """Variables to add to the launched command's environment (after
        before_launch; not called in attach mode)."""
        return {}

    def on_target(self, ctx: RecorderContext) -> None:
        """ctx.target_pids is known (launched, or the attached tree)."""

    def tick(self, ctx: RecorderContext) -> None:
        """Consumer thread, after each drain: keep it cheap."""

    def stop(self, ctx: RecorderContext) -> None:
        """Recording ends: before the final drain and the END block."""

    def capture_range(self) -> str:
        """Non-empty: recording starts off and this family's capture_marks
        open and close it (the name goes into the raw log)."""
        return ""

    def capture_marks(self, ring: int, rows) -> list[tuple[int, bool]]:
        """Consumer thread, each drained batch before the capture window is
        applied: (ts, on) edges of the window found in it (a capture range).
        rows: capture.as_rows of the batch."""
        return []

    def always_keep(self, ring: int, rows):
        """Rows of this family's rings kept outside the capture window (None:
        none): the descriptor's always_keep, which a conversion's cut uses too."""
        keep = always_keep_of(FAMILIES[self.family]) if self.family else None
        return keep(ring, rows) if keep is not None else None

    def progress(self, ctx: RecorderContext) -> int:
        """--hang-timeout (timeline.hang): a count that grows while the job makes
        progress this family can see (the cuda family: calls returned)."""
        return 0

    def in_flight(self, ctx: RecorderContext, threads: dict[int, int], now_ns: int) -> dict[int, dict]:
        """At a hang: {tid: {"call": name, "since": ts}} for threads (tid -> tgid)
        stuck in a call this family traces; it may write records for them."""
        return {}

    def drops(self) -> dict[str, int]:
        """After stop: records this plugin knows were lost, by family (for
        families whose records do not come through a BPF ring)."""
        return {}


def always_keep_of(fam):
    """A family's always_keep function (Family.always_keep), None without one."""
    return load_spec(fam.always_keep) if fam.always_keep else None


def load(families, cfg) -> list[RecorderPlugin]:
    out = []
    for name in families:
        fam = FAMILIES[name]
        if fam.plugin:
            out.append(load_spec(fam.plugin)(cfg, options_of(cfg, name)))
    return out
