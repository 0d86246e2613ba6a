"""`timeline record`: load probes, follow the target tree, write the raw log.

The hot path is a consumer thread that copies committed ring-buffer spans
into the raw log (timeline.ring_reader); nothing is decoded while recording.
Conversion to Perfetto/Chrome JSON happens afterwards (timeline.converters).
"""
from __future__ import annotations

import os
import platform
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import psutil

from . import __version__, events, libbpf
from .bpf_session import BpfSession
from .errors import MachineError, UserError
from . import capture
from .capture import CaptureWindow, check_capture_range, toggle_recording
from .rawlog import RawLogFull
from .rawlog_sink import RingOptions, open_raw_log
from .hang import HangWatch
from .identity import InvokingUser, invoking_user
from .privileges import can_load_bpf
from .ranks import RankWatcher
from .recorder_plugins import RecorderContext
from .recorder_plugins import load as load_plugins
from .registry import DEFAULT_EVENTS, FAMILIES, KIND_NAMES
from .target import exit_status, launch, resolve_command, snapshot_tree

MAX_RING_MIB = 2048  # a ring's size is a u32 number of bytes (max_entries)


@dataclass
class RecordConfig:
    raw_path: str
    command: list[str] | None = None
    pid: int | None = None
    events: tuple[str, ...] = DEFAULT_EVENTS
    duration: float | None = None
    # whom output files are created as and belong to, and files named by the user
    # or the target are read as: in sudo mode the user behind sudo (timeline.identity)
    user: InvokingUser = field(default_factory=invoking_user)
    as_root: bool = False  # --as-root: a launched command runs as root even in sudo mode
    ring_mib: dict[str, int] = field(default_factory=dict)  # family -> ring MiB (--buffer-size); others: .bpf.c size
    poll_interval: float = 0.05
    # family -> its options dataclass (registry.family_options); a family not here has its defaults
    options: dict[str, object] = field(default_factory=dict)
    delay: float = 0.0  # --delay: seconds before non-proc records are kept (timeline.capture)
    ring: RingOptions | None = None  # --ring: keep only the last seconds, and dumps (timeline.rawlog_sink)
    warn: object = None  # callable(line): a problem to say now, while recording goes on (else: the summary)
    # --hang-timeout (with --ring): dump after this long without progress (timeline.hang)
    hang_timeout: float | None = None

    @property
    def target_user(self) -> InvokingUser:
        """Whom a launched command runs as, and as whom plugins read the files
        it names: the user, or with --as-root ourselves."""
        return InvokingUser.ourselves() if self.as_root else self.user


@dataclass
class RecordResult:
    exit_code: int
    reason: str
    records: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)
    drops: dict[str, int] = field(default_factory=dict)  # records lost, all causes
    raw_bytes: int = 0
    elapsed: float = 0.0
    notes: list[str] = field(default_factory=list)  # plugins' summary lines
    drop_causes: dict[str, dict] = field(default_factory=dict)  # BpfSession.drop_causes()
    disk_full: RawLogFull | None = None  # the raw log's file system filled up: recording stopped there
    ranked: int = 0  # processes with rank variables (RANK...) seen
    # a descriptor on the finished raw log (the caller reads it back through this,
    # never by name, and closes it); -1 when there is none (--ring: see kept_segments)
    raw_fd: int = -1
    raw_error: str | None = None  # --ring: why the raw log at raw_path could not be written
    kept_segments: list[str] = field(default_factory=list)  # --ring: ... so these hold the recording
    dumps: int = 0  # --ring: dumps written while recording


def preflight(cfg: RecordConfig) -> None:
    """Every check that can fail before anything is loaded or launched."""
    check_capture_range(cfg)
    if not can_load_bpf():
        raise MachineError("timeline record needs root (CAP_BPF and CAP_PERFMON) to load eBPF programs: run it with sudo")
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        raise MachineError("this kernel exposes no BTF (/sys/kernel/btf/vmlinux): timeline needs CONFIG_DEBUG_INFO_BTF=y")
    try:
        libbpf.lib()
    except libbpf.LibbpfMissing as e:
        raise MachineError(str(e)) from None
    unknown = [e for e in cfg.events if e not in FAMILIES]
    if unknown:
        raise UserError(f"unknown event family {unknown[0]!r} (known: {', '.join(sorted(FAMILIES))})")
    if cfg.pid is not None:
        if cfg.pid <= 0 or not psutil.pid_exists(cfg.pid):
            raise UserError(f"no process with PID {cfg.pid}")
        if cfg.pid == os.getpid():
            raise UserError("timeline cannot record itself")
    elif cfg.command:
        resolve_command(cfg.command, dict(os.environ))
    else:
        raise UserError("nothing to record: give a command after -- or --pid N")
    for fam, mib in cfg.ring_mib.items():
        if fam not in FAMILIES or not any(r.map for r in FAMILIES[fam].rings):
            rings = ", ".join(f.name for f in FAMILIES.values() if any(r.map for r in f.rings))
            raise UserError(f"--buffer-size {fam}=...: no ring buffer of that name (known: {rings})")
        if mib < 1 or mib & (mib - 1):
            raise UserError("--buffer-size must be a power of two number of MiB (1, 2, 4, ...)")
        if mib > MAX_RING_MIB:
            raise UserError(f"--buffer-size {fam}={mib}: at most {MAX_RING_MIB} MiB per ring")


def _clock_snapshot(tries: int = 8) -> dict:
    """BOOTTIME and MONOTONIC read between two REALTIME reads, REALTIME taken
    as their midpoint: of several tries, the one whose REALTIME reads were
    closest (a preemption between them would shift a merged machine's events
    by as long as it lasted)."""
    best = None
    for _ in range(tries):
        r0 = time.clock_gettime_ns(time.CLOCK_REALTIME)
        b = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        m = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        r1 = time.clock_gettime_ns(time.CLOCK_REALTIME)
        if best is None or r1 - r0 < best[0]:
            best = (r1 - r0, b, (r0 + r1) // 2, m)
    _, b, r, m = best
    return {"boottime_ns": b, "realtime_ns": r, "monotonic_ns": m}


def _header(cfg: RecordConfig, names: list[str], plugins: list) -> dict:
    """The raw log's header: clocks, machine, what is recorded, and the rings' layouts."""
    header = {
        "version": 1,
        "timeline_version": __version__,
        "clock": _clock_snapshot(),
        "uname": dict(zip(("sysname", "nodename", "release", "version", "machine"), os.uname())),
        "ncpu": os.cpu_count(),
        "mode": "attach" if cfg.pid else "launch",
        "command": list(cfg.command) if cfg.command else None,
        "target_pid": cfg.pid,
        "recorder_pid": os.getpid(),
        "events": names,
        "python": platform.python_version(),
    }
    for plugin in plugins:
        header.update(plugin.header())
    fams = [FAMILIES[name] for name in header["events"]]
    header["rings"] = {str(r.id): {"name": f.name, "record_size": r.dtype.itemsize,
                                   "stride": events.ring_stride(r.dtype)} for f in fams for r in f.rings}
    return header


def _end_stats(drops: dict, causes: dict, exit_code: int, reason: str, stop_ts: int) -> dict:
    """A raw log's END block (the recording's, or a dump's), with the clocks read now."""
    return {"drops": drops, "drop_causes": causes, "clock_end": _clock_snapshot(), "exit_code": exit_code,
            "reason": reason, "stop_ts": stop_ts}


class _Consumer(threading.Thread):
    """Copies ring data to the raw log until stopped."""

    def __init__(self, session: BpfSession, writer, interval: float):  # writer: the raw log sink (rawlog_sink)
        super().__init__(name="timeline-consumer", daemon=True)
        self.session, self.writer, self.interval = session, writer, interval
        # Waits between drains are on a bare lock that stop() releases: an
        # Event's wait costs a Condition and a fresh lock per call, on a
        # thread that wakes cold several times a second.
        self._stopping = False
        self._wake = threading.Lock()
        self._wake.acquire()
        self.lock = threading.Lock()  # one writer at a time (plugins, final drain)
        self.plugins: list = []
        self._ranks = RankWatcher()  # rank variables, read once per process image
        self.n_ranked = 0              # ranked process images seen (the summary's per-rank lines)
        self.ctx: RecorderContext | None = None
        self.window: CaptureWindow | None = None  # --delay (timeline.capture)
        self.error: BaseException | None = None
        self.disk_full: RawLogFull | None = None  # recording stopped: no room for the raw log

    def drain_once(self) -> int:
        total = 0
        with self.lock:
            batches = [(rid, reader.stride, reader.drain()) for rid, reader in self.session.readers.items()]
            if self.window is not None:
                # Window edges first (a capture range's start/stop calls), from
                # every ring of this drain, then the cut: a record drained from
                # another ring in the same drain is judged by the new edges.
                marks = sorted(m for rid, stride, data in batches if data
                               for plugin in self.plugins
                               for m in plugin.capture_marks(rid, capture.as_rows(data, stride)))
                for ts, on in marks:
                    (self.window.set_on if on else self.window.set_off)(ts)
                    self.writer.write_meta({"type": "capture", "on" if on else "off": ts, "by": "range"})
                batches = [(rid, stride, self.window.keep(rid, data, stride, self._always_keep))
                           for rid, stride, data in batches]
            for rid, stride, data in batches:
                if not data:
                    continue
                self.writer.write_ring(rid, data)
                total += len(data)
                if self.ctx is not None:
                    self.ctx.note_drained(rid, data, stride)
        return total

    def _always_keep(self, ring, rows):
        masks = [m for m in (p.always_keep(ring, rows) for p in self.plugins) if m is not None]
        return np.logical_or.reduce(masks) if masks else None

    def stop(self) -> None:
        self._stopping = True
        if self._wake.locked():
            self._wake.release()

    def kind_counts(self) -> dict[tuple[int, int], int]:
        """(ring id, kind) -> records drained."""
        return {(rid, int(k)): int(r.kinds[k]) for rid, r in self.session.readers.items()
                for k in np.flatnonzero(r.kinds)}

    # While little data moves, the wait between drains doubles up to this many
    # times the base interval: each drain costs the recorder's CPU (which
    # competes with training) whether or not there is anything to copy.  At
    # 4 x 50 ms, the smallest ring still holds a 0.2 s burst several times
    # the rates seen in training.
    BACKOFF = 4
    QUIET_BYTES = 64 << 10

    def _note_ranks(self) -> None:
        """Each new process image's rank variables, as a "ranks" meta block."""
        found = self._ranks.poll(self.ctx.processes)
        if found:
            self.n_ranked += len(found)
            self.ctx.write_meta({"type": "ranks", "ts": self.ctx.now_ns(), "processes": found})

    def run(self) -> None:
        interval = self.interval
        try:
            while not self._stopping:
                moved = self.drain_once()
                if self.ctx is not None:
                    self.ctx.reconcile_processes()
                    self._note_ranks()
                for plugin in self.plugins:
                    plugin.tick(self.ctx)
                if moved >= (1 << 20):
                    interval = self.interval
                    continue  # busy: drain again at once
                if moved < self.QUIET_BYTES:
                    interval = min(interval * 2, self.interval * self.BACKOFF)
                else:
                    interval = self.interval
                self._wake.acquire(timeout=interval)
        except RawLogFull as e:  # stop recording; the target runs on (Recorder._wait_loop)
            self.disk_full = e
        except BaseException as e:  # surfaced by the recorder
            self.error = e


class _Sleeper:
    """The main thread's wait between its checks (target exited? signal?
    duration over?): it wakes when the target exits (a pidfd) or a signal
    arrives (signal.set_wakeup_fd), so it need not wake ten times a second
    to poll.  Without pidfds (Linux < 5.3) it polls every POLL_S."""

    POLL_S = 0.1

    def __init__(self, pid: int):
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.old = signal.set_wakeup_fd(self.w, warn_on_full_buffer=False)

    def sleep(self, timeout: float) -> None:
        fds = [self.r]
        if self.pidfd is None:
            timeout = min(timeout, self.POLL_S)
        else:
            fds.append(self.pidfd)
        ready = select.select(fds, [], [], max(timeout, 0.0))[0]
        if self.r in ready:
            try:
                while os.read(self.r, 512):
                    pass
            except BlockingIOError:
                pass
        if self.pidfd is not None and self.pidfd in ready:
            os.close(self.pidfd)  # exited: readable from now on; poll if the caller waits on
            self.pidfd = None

    def close(self) -> None:
        signal.set_wakeup_fd(self.old)
        for fd in (self.r, self.w, self.pidfd):
            if fd is not None:
                os.close(fd)


class Recorder:
    def __init__(self, cfg: RecordConfig, status=None):
        self.cfg = cfg
        self.status = status  # callable(dict) for the progress line; None when none is shown
        self._signals: list[int] = []
        self.start_time = 0.0
        self.plugins: list = []

    # -- signals ------------------------------------------------------------
    def _on_signal(self, signum, _frame):
        self._signals.append(signum)

    def _install_signals(self):
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1,
                                                          signal.SIGUSR2)}
        return lambda: [signal.signal(s, h) for s, h in old.items()]

    # -- main ---------------------------------------------------------------
    def run(self) -> RecordResult:
        cfg = self.cfg
        preflight(cfg)
        names = list(dict.fromkeys(["proc", *cfg.events]))  # proc first, each family once
        plugins = load_plugins(names, cfg)
        for plugin in plugins:
            plugin.preflight()
        sink = open_raw_log(cfg.raw_path, _header(cfg, names, plugins), cfg.user, cfg.ring, self._warn)
        session = self._load_session(names, sink, {p.family: p.rodata() for p in plugins})
        restore = self._install_signals()
        consumer = _Consumer(session, sink, cfg.poll_interval)
        sink.start(consumer._always_keep, consumer.lock)
        ctx = self.ctx = consumer.ctx = RecorderContext(cfg, session, sink, consumer.lock)
        ctx.window_holder = consumer
        proc: subprocess.Popen | None = None
        reason, code = "target exited", 0
        try:
            session.attach()
            for plugin in plugins:
                plugin.before_launch(ctx)
            consumer.plugins = plugins
            self._open_window(consumer, plugins)
            consumer.start()
            self.start_time = time.monotonic()
            proc = self._start_target(session, plugins)
            for plugin in plugins:
                plugin.on_target(ctx)
            self.plugins = plugins
            reason, code = self._wait(proc, consumer, session, sink)
        finally:
            restore()
            result = self._finish(session, sink, consumer, reason, code, plugins)
        if proc is not None and proc.poll() is None:
            # Recording stopped (duration) while the target runs on: keep its
            # exit code as ours, like a shell would.
            result.exit_code = exit_status(proc.wait())
        return result

    def _load_session(self, names: list[str], sink, rodata: dict[str, dict[str, int]]) -> BpfSession:
        """The families' BPF objects, loaded (not attached); a failure removes the raw log again."""
        try:
            return BpfSession(names, launcher_tgid=os.getpid(),
                              ring_sizes={k: v << 20 for k, v in self.cfg.ring_mib.items()}, rodata=rodata)
        except libbpf.BPFError as e:
            sink.discard()
            if e.log and os.environ.get("TIMELINE_DEBUG"):
                sys.stderr.write(f"libbpf said:\n{e.log}\n")
            raise MachineError(f"loading the eBPF programs failed: {e}") from None

    def _open_window(self, consumer: _Consumer, plugins: list) -> None:
        """A capture range (off until the target opens it) or --delay: which records are kept from the start."""
        ctx = self.ctx
        ranges = [r for r in (p.capture_range() for p in plugins) if r]
        if ranges:  # off until the target opens the range
            consumer.window = CaptureWindow(capture.NEVER)
            ctx.write_meta({"type": "capture", "range": ranges[0]})
        elif self.cfg.delay:
            consumer.window = CaptureWindow(ctx.now_ns() + int(self.cfg.delay * 1e9))
            ctx.write_meta({"type": "capture", "start": consumer.window.start_ns})

    def _start_target(self, session: BpfSession, plugins: list) -> subprocess.Popen | None:
        """Follow the tree of --pid, or launch the command (its process, None for --pid)."""
        cfg, ctx = self.cfg, self.ctx
        if cfg.pid:
            ctx.target_pids = self._attach_tree(session, ctx, cfg.pid)
            return None
        extra_env: dict[str, str] = {}
        for plugin in plugins:
            extra_env.update(plugin.launch_env(ctx))
        session.arm_launch(True)
        try:
            proc = launch(cfg.command, cfg.target_user, extra_env)
        finally:
            session.arm_launch(False)
        ctx.target_pids = [proc.pid]
        ctx.add_processes(ctx.target_pids)
        ctx.write_meta({"type": "launched", "pid": proc.pid, "ts": ctx.now_ns()})
        return proc

    def _attach_tree(self, session: BpfSession, ctx: RecorderContext, pid: int) -> list[int]:
        seen: dict[int, dict] = {}
        # Two passes: children forked between the first scan and the map
        # insert are caught by the second (after that, fork events do it).
        for _ in range(2):
            for p in snapshot_tree(pid):
                for t in p["threads"]:
                    session.track(t["tid"], p["pid"])
                seen[p["pid"]] = p
        ctx.write_meta({"type": "procs", "ts": ctx.now_ns(), "processes": list(seen.values())})
        ctx.add_processes(seen)
        return sorted(seen)

    # Longest wait between checks when nothing wakes the main thread: it only
    # bounds how late a failed consumer thread is noticed.
    WAIT_MAX = 1.0
    HANG_POLL_S = 0.5  # --hang-timeout: how often progress is looked for
    STATUS_S = 0.5  # progress for the status line, which shows it once a second

    def _wait(self, proc, consumer: _Consumer, session: BpfSession, sink) -> tuple[str, int]:
        sleeper = _Sleeper(proc.pid if proc is not None else self.cfg.pid)
        try:
            return self._wait_loop(proc, consumer, session, sink, sleeper)
        finally:
            sleeper.close()

    def _wait_loop(self, proc, consumer: _Consumer, session: BpfSession, sink, sleeper: _Sleeper) -> tuple[str, int]:
        cfg = self.cfg
        deadline = self.start_time + cfg.duration if cfg.duration else None
        interrupts = 0
        target = None if proc else psutil.Process(cfg.pid)
        watch = HangWatch(cfg.hang_timeout, self.ctx.now_ns()) if cfg.hang_timeout else None
        while True:
            if consumer.error:
                raise consumer.error
            if consumer.disk_full:
                return "disk full", 0
            if proc is not None:
                rc = proc.poll()
                if rc is not None:
                    return ("target exited" if not interrupts else "interrupted"), exit_status(rc)
            elif not target.is_running() or target.status() == psutil.STATUS_ZOMBIE:
                return "target exited", 0
            while self._signals:
                sig = self._signals.pop(0)
                if sig == signal.SIGUSR1:  # toggle recording (timeline.capture)
                    toggle_recording(consumer, self.ctx)
                    continue
                if sig == signal.SIGUSR2:  # --ring: dump the last DURATION now, record on
                    self._dump(consumer, session, sink, "SIGUSR2")
                    continue
                if proc is None:  # attach mode: stop recording, leave the target alone
                    return ("interrupted" if sig == signal.SIGINT else "terminated"), 128 + sig
                interrupts += 1
                self._forward(proc, sig, interrupts)
            while self.ctx.failed_exits:  # a process of the job died: dump what led to it (--ring)
                pid, status = self.ctx.failed_exits.pop(0)
                if proc is None or pid != proc.pid:  # the target's own end: the trace at exit is the dump
                    self._dump(consumer, session, sink, f"pid {pid} " + (f"killed by signal {status & 0x7f}"
                                                                        if status & 0x7f else f"exited {status >> 8}"))
            if watch is not None:
                now_ns = self.ctx.now_ns()
                if watch.poll(self.ctx, self.plugins, now_ns):
                    self.ctx.write_meta(watch.snapshot(self.ctx, self.plugins, now_ns))
                    self._dump(consumer, session, sink, "hang")
            now = time.monotonic()
            if deadline and now >= deadline:
                return "duration reached", 0
            timeout = self.WAIT_MAX if watch is None else self.HANG_POLL_S
            if self.status is not None:
                self.status(self._progress(consumer, session))  # reads BPF maps: only when shown
                timeout = min(timeout, self.STATUS_S)
            if deadline:
                timeout = min(timeout, deadline - now)
            sleeper.sleep(timeout)

    def _dump(self, consumer: _Consumer, session: BpfSession, sink, why: str) -> None:
        """--ring, while recording: the last DURATION as a raw log of its own
        (the sink's dump; a plain log has none).  Recording goes on."""
        try:
            consumer.drain_once()
        except RawLogFull as e:  # the wait loop stops recording on its next turn
            consumer.disk_full = consumer.disk_full or e
            return
        sink.dump(why, lambda reason: _end_stats(session.drops(), session.drop_causes(), 0, reason,
                                                 time.clock_gettime_ns(time.CLOCK_BOOTTIME)))

    def _warn(self, line: str) -> None:
        if self.cfg.warn is not None:
            self.cfg.warn(line)
        else:
            self.ctx.summary.append(f"warning: {line}")

    def _forward(self, proc: subprocess.Popen, sig: int, nth: int) -> None:
        """Launch mode: the target decides when it ends; we follow.

        Ctrl-C in the terminal already reaches the target (same process
        group), so the first SIGINT is not forwarded when the target shares
        our foreground group; a second one sends SIGTERM, a third SIGKILL.
        SIGTERM/SIGHUP to the recorder are passed on to the target.
        """
        if sig == signal.SIGINT:
            if nth == 1 and not self._target_in_foreground(proc):
                self._kill(proc, signal.SIGINT)
            elif nth == 2:
                self._kill(proc, signal.SIGTERM)
            elif nth >= 3:
                self._kill(proc, signal.SIGKILL)
        else:
            self._kill(proc, sig if nth < 3 else signal.SIGKILL)

    @staticmethod
    def _target_in_foreground(proc) -> bool:
        try:
            fd = os.open("/dev/tty", os.O_RDONLY)
        except OSError:
            return False
        try:
            return os.tcgetpgrp(fd) == os.getpgid(proc.pid)
        except OSError:
            return False
        finally:
            os.close(fd)

    @staticmethod
    def _kill(proc, sig) -> None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def _progress(self, consumer: _Consumer, session: BpfSession) -> dict:
        n = sum(r.records for r in session.readers.values())
        elapsed = time.monotonic() - self.start_time
        drops = sum(sum(v) for v in session.drops().values())
        return {"elapsed": elapsed, "records": n, "rate": n / elapsed if elapsed > 0 else 0.0,
                "drops": drops, "raw_bytes": consumer.writer.bytes_written}

    def _finish(self, session, sink, consumer, reason, code, plugins) -> RecordResult:
        """Detach, drain everything left, write END: always runs."""
        elapsed = time.monotonic() - self.start_time if self.start_time else 0.0
        # Recording ends now: what follows (plugins' last look, detaching the
        # probes, up to ~1 s with many uprobes) is our bookkeeping, not part of
        # the timeline the user looks at.
        stop_ts = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        sink.recording_ends()
        drops: dict[str, list[int]] = {}
        causes: dict[str, dict] = {}
        consumer.stop()
        if consumer.is_alive():
            consumer.join()
        try:
            _stop_plugins(plugins, consumer.ctx)
            session.detach()
            drops, causes = _all_drops(session, plugins)
            try:
                if consumer.disk_full is None:
                    consumer.drain_once()
                sink.finish(_end_stats(drops, causes, code, reason, stop_ts))
            except RawLogFull as e:  # no room for the last blocks: the log stays whole up to e.kept
                consumer.disk_full = consumer.disk_full or e
                reason = "disk full"
            end = sink.end(_end_stats(drops, causes, code, reason, stop_ts), consumer.disk_full)
            if end.note:
                consumer.ctx.summary.append(end.note)
        finally:
            sink.close()
            records = {f.name: sum(session.readers[r.id].records for r in f.rings)
                       for f in session.bpf_families}
            kind_counts = consumer.kind_counts()
            session.close()
        kinds = {KIND_NAMES.get(k, f"{k[0]}:{k[1]}"): v for k, v in sorted(kind_counts.items())}
        return RecordResult(code, reason, records, kinds, {k: sum(v) for k, v in drops.items()}, end.size, elapsed,
                            list(consumer.ctx.summary) if consumer.ctx else [], drop_causes=causes,
                            disk_full=consumer.disk_full, ranked=consumer.n_ranked, raw_fd=end.fd,
                            raw_error=end.error, kept_segments=end.kept_segments, dumps=sink.dumps)


def _stop_plugins(plugins: list, ctx: RecorderContext) -> None:
    """Each plugin's last look; a failing one costs a summary line, never the recording."""
    for plugin in plugins:
        try:
            plugin.stop(ctx)
        except RawLogFull:
            pass  # said once, in the summary's disk-full line
        except Exception as e:  # a plugin must not cost the recording
            ctx.summary.append(f"warning: {plugin.family}: {e}")


def _all_drops(session: BpfSession, plugins: list) -> tuple[dict[str, list[int]], dict[str, dict]]:
    """(family -> records lost, per CPU and plugin; BpfSession.drop_causes())."""
    drops, causes = session.drops(), session.drop_causes()
    for plugin in plugins:
        for fam, n in plugin.drops().items():
            drops[fam] = [*drops.get(fam, []), n]
    return drops, causes
