"""Recorder plugin of the `gpu` family: inject our CUPTI/NVTX library into a
launched command and store what it sends.

Before launch it starts the socket receiver (receiver.py) and asks the
recorder to put three variables in the target's environment:
CUDA_INJECTION64_PATH (the driver loads the library at cuInit),
NVTX_INJECTION64_PATH (NVTX's loader does, at the first NVTX call) and
TIMELINE_GPU_SOCKET (where the library connects).  Processes the target
starts inherit them, so every CUDA process of the tree reports.

A variable the user already set is left alone (another tool, e.g. Nsight
Systems, injects itself that way; CUPTI before CUDA 13 allows one
subscriber): the summary says so.  Attach mode (--pid) cannot inject: a
running process read its environment long ago.
"""
from __future__ import annotations

import os
import struct
import time

from ..recorder_plugins import RecorderContext, RecorderPlugin
from . import receiver as rx_bounds
from .receiver import Receiver

LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtimeline_inject.so")
INJECTION_VARS = ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH")
SUMMARY_PIDS = 128        # processes named one line each in the summary; the rest are summed in one line
SUMMARY_TEXT_CHARS = 200  # a string from the library (HELLO's reason) as the summary quotes it
# A process with CUPTI active that lived this long and sent no kernel/copy/memset record: CUPTI's
# activity buffers went to another subscriber (seen on an H200 with torch.profiler in the target).
QUIET_CUPTI_MIN_LIFE_S = 1.0
GPU_WORK_RECORDS = ("kernel", "memcpy", "memset")


def _ancestors(pid: int, limit: int = 64):
    """pid's parent, grandparent... (from /proc; stops at init or a vanished process)."""
    for _ in range(limit):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            return
        pid = int(stat[stat.rindex(b")") + 2:].split()[1])  # field 4, after the comm in parentheses
        if pid <= 1:
            return
        yield pid


class GpuPlugin(RecorderPlugin):
    family = "gpu"

    def __init__(self, cfg, options=None):
        super().__init__(cfg, options)
        self.receiver: Receiver | None = None
        self.ctx: RecorderContext | None = None
        self.kept_user_env: list[str] = []
        self.hellos: dict[int, dict] = {}
        self.lifetimes: dict[int, list] = {}  # pid -> [HELLO time, exit STATUS time or None] on self.clock
        self.clock = time.monotonic

    # -- hooks ------------------------------------------------------------
    def before_launch(self, ctx: RecorderContext) -> None:
        if self.cfg.pid or not os.path.isfile(LIBRARY):
            return
        self.ctx = ctx
        self.receiver = Receiver(_HelloTap(ctx, self.hellos, self.lifetimes, self.clock), self._allowed)
        self.receiver.start()

    def launch_env(self, ctx: RecorderContext) -> dict[str, str]:
        if self.receiver is None:
            return {}
        env = {"TIMELINE_GPU_SOCKET": self.receiver.socket_name}
        if self.options is not None and self.options.gpu_sync:
            env["TIMELINE_GPU_SYNC"] = "1"  # activity.c: CUPTI's synchronization records
        for var in INJECTION_VARS:
            if os.environ.get(var):
                self.kept_user_env.append(var)
            else:
                env[var] = LIBRARY
        return env

    def stop(self, ctx: RecorderContext) -> None:
        if self.cfg.pid:
            ctx.summary.append("gpu: attach mode (--pid) cannot inject CUPTI into a running process: "
                               "GPU kernels and NVTX ranges are recorded only for a launched command")
            return
        if not os.path.isfile(LIBRARY):
            ctx.summary.append("gpu: the injection library is not built (python -m timeline.bpf.build): "
                               "no GPU-side activity")
            return
        if self.receiver is None:
            return
        self.receiver.stop()
        ctx.summary.extend(self.summary_lines())
        stats = self.receiver.stats
        ctx.write_meta({"type": "gpu_receiver", "stats": dict(stats), "kept_user_env": self.kept_user_env,
                        "counts": {str(p): c for p, c in self.receiver.counts.items()},
                        "other_counts": self.receiver.other_counts, "bounds": dict(self.receiver.bounds)})

    def drops(self) -> dict[str, int]:
        """Records lost on the way: CUPTI's own count, and messages cut short or cut for the buffer bound."""
        if self.receiver is None:
            return {}
        s = self.receiver.stats
        return {"gpu": s["cupti_dropped"] + s["cut_short"] + s["wire_errors"] + self.receiver.bounds["over_buffer"]}

    # -- helpers ----------------------------------------------------------
    def _allowed(self, pid: int) -> bool:
        """Only processes of the recorded tree may send records."""
        ctx = self.ctx
        if ctx is None:
            return False
        if pid in ctx.processes:
            return True
        # Not drained yet (a fork the consumer has not seen): the BPF map of
        # tracked threads is the source of truth, then the process's ancestry.
        try:
            if ctx.session.tracked.lookup(struct.pack("<I", pid)) is not None:
                return True
        except Exception:  # noqa: BLE001 - a failed lookup only means "look further"
            pass
        targets = set(ctx.target_pids)
        return any(a in targets for a in _ancestors(pid))

    def summary_lines(self) -> list[str]:
        lines = []
        if self.kept_user_env:
            lines.append(f"gpu: {', '.join(self.kept_user_env)} already set by you: left as is "
                         "(another tool injects itself; CUPTI before CUDA 13 allows one subscriber)")
        counts = self.receiver.counts if self.receiver else {}
        per_pid = [(pid, _what(per)) for pid, per in sorted(counts.items())]
        for pid, info in sorted(self.hellos.items()):
            if pid in counts or info.get("active"):
                continue
            if info.get("cuda_injection") or info.get("nvtx"):
                reason = _one_line(info.get("reason") or "CUPTI inactive", SUMMARY_TEXT_CHARS)
                per_pid.append((pid, f"no GPU activity recorded: {reason}"))
        lines += [f"gpu: pid {pid}: {what}" for pid, what in per_pid[:SUMMARY_PIDS]]
        lines += [f"gpu: pid {pid}: CUPTI active but no GPU activity arrived: another CUPTI user in the process "
                  "(torch.profiler, nsys) takes CUPTI's activity buffers; record without it"
                  for pid in self.quiet_cupti_pids(counts)[:SUMMARY_PIDS]]
        if len(per_pid) > SUMMARY_PIDS:
            lines.append(f"gpu: {len(per_pid) - SUMMARY_PIDS} more process(es), each in the raw log")
        if self.receiver and self.receiver.other_counts:
            lines.append(f"gpu: processes past the first {rx_bounds.MAX_PIDS}, together: "
                         f"{_what(self.receiver.other_counts)}")
        s = self.receiver.stats if self.receiver else {}
        if s.get("cupti_dropped"):
            lines.append(f"gpu: CUPTI dropped {s['cupti_dropped']} records (its buffers were full)")
        if s.get("refused"):
            lines.append(f"gpu: refused {s['refused']} connection(s) from processes outside the recording")
        if s.get("wire_errors") or s.get("cut_short"):
            lines.append(f"gpu: {s.get('wire_errors', 0)} malformed and {s.get('cut_short', 0)} cut-short "
                         "message(s) from the injection library")
        if self.receiver and any(self.receiver.bounds.values()):
            lines.append(bounds_line(self.receiver.bounds, self.receiver.max_connections))
        return lines

    def quiet_cupti_pids(self, counts: dict, now: float | None = None) -> list[int]:
        """Processes whose library had CUPTI active, that lived QUIET_CUPTI_MIN_LIFE_S or more
        (to their exit STATUS, or to now) and sent no GPU work record: a process that only
        initialised CUDA exits sooner."""
        now = self.clock() if now is None else now
        quiet = []
        for pid, info in sorted(self.hellos.items()):
            if not (info.get("active") and info.get("cuda_injection")) or pid not in self.lifetimes:
                continue
            start, end = self.lifetimes[pid]
            if (end if end is not None else now) - start < QUIET_CUPTI_MIN_LIFE_S:
                continue
            if not any(counts.get(pid, {}).get(k) for k in GPU_WORK_RECORDS):
                quiet.append(pid)
        return quiet


def bounds_line(bounds: dict, max_connections: int) -> str:
    """One line for everything the receiver refused or cut at its bounds (receiver.py), counted."""
    said = {
        "over_connections": f"connection(s) closed past {max_connections} open at once",
        "accept_failed": "pause(s) accepting for lack of file descriptors",
        "over_buffer": f"connection(s) cut holding unfinished messages past {rx_bounds.MAX_BUFFERED_BYTES >> 20} MiB",
        "control_ignored": f"HELLO/STATUS message(s) past {rx_bounds.MAX_CONTROL_MESSAGES} per connection ignored",
        "fields_left_out": "HELLO/STATUS field(s) unknown, mistyped or out of range left out",
        "texts_cut": f"string(s) cut to {rx_bounds.MAX_TEXT_CHARS} characters",
        "other_pids": f"records message(s) from processes past the first {rx_bounds.MAX_PIDS} summed together",
        "errors": "connection(s) ended by an error handling them",
    }
    parts = [f"{n} {said[k]}" for k, n in bounds.items() if n and k in said]
    return "gpu: input past the receiver's bounds, recording went on: " + "; ".join(parts)


def _what(per: dict) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(per.items(), key=lambda kv: -kv[1]))


def _one_line(text: str, limit: int) -> str:
    """A string from the target as one summary line: control characters shown as '?', cut to `limit`."""
    text = "".join(c if c.isprintable() else "?" for c in text[:limit + 1])
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _HelloTap:
    """The receiver's sink: passes everything to the recording, keeping each
    process's HELLO (what the library could do there) for the summary."""

    def __init__(self, ctx: RecorderContext, hellos: dict, lifetimes: dict | None = None, clock=time.monotonic):
        self.ctx, self.hellos, self.clock = ctx, hellos, clock
        self.lifetimes = {} if lifetimes is None else lifetimes

    def write_ring(self, ring: int, data: bytes) -> None:
        self.ctx.write_ring(ring, data)

    def write_meta(self, obj: dict) -> None:
        pid = obj.get("pid")
        if obj.get("type") == "gpu_hello" and isinstance(obj.get("info"), dict) \
                and (pid in self.hellos or len(self.hellos) < rx_bounds.MAX_PIDS):
            # info holds only the HELLO's known keys, bounded (receiver.clean_info)
            self.hellos[pid] = {**self.hellos.get(pid, {}), **obj["info"]}
            self.lifetimes.setdefault(pid, [self.clock(), None])
        elif obj.get("type") == "gpu_status" and pid in self.lifetimes and isinstance(obj.get("info"), dict) \
                and obj["info"].get("when") == "exit":
            self.lifetimes[pid][1] = self.clock()
        self.ctx.write_meta(obj)
