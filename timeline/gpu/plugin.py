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

from ..recorder_plugins import RecorderContext, RecorderPlugin
from .receiver import Receiver

LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtimeline_inject.so")
INJECTION_VARS = ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH")


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

    # -- hooks ------------------------------------------------------------
    def before_launch(self, ctx: RecorderContext) -> None:
        if self.cfg.pid or not os.path.isfile(LIBRARY):
            return
        self.ctx = ctx
        self.receiver = Receiver(_HelloTap(ctx, self.hellos), self._allowed)
        self.receiver.start()

    def launch_env(self, ctx: RecorderContext) -> dict[str, str]:
        if self.receiver is None:
            return {}
        env = {"TIMELINE_GPU_SOCKET": self.receiver.socket_name}
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
                        "counts": {str(p): c for p, c in self.receiver.counts.items()}})

    def drops(self) -> dict[str, int]:
        """Records lost on the way: CUPTI's own count, and messages cut short."""
        if self.receiver is None:
            return {}
        s = self.receiver.stats
        return {"gpu": s["cupti_dropped"] + s["cut_short"] + s["wire_errors"]}

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
        for pid, per in sorted(counts.items()):
            what = ", ".join(f"{n} {k}" for k, n in sorted(per.items(), key=lambda kv: -kv[1]))
            lines.append(f"gpu: pid {pid}: {what}")
        for pid, info in sorted(self.hellos.items()):
            if pid in counts or info.get("active"):
                continue
            if info.get("cuda_injection") or info.get("nvtx"):
                lines.append(f"gpu: pid {pid}: no GPU activity recorded: {info.get('reason') or 'CUPTI inactive'}")
        s = self.receiver.stats if self.receiver else {}
        if s.get("cupti_dropped"):
            lines.append(f"gpu: CUPTI dropped {s['cupti_dropped']} records (its buffers were full)")
        if s.get("refused"):
            lines.append(f"gpu: refused {s['refused']} connection(s) from processes outside the recording")
        if s.get("wire_errors") or s.get("cut_short"):
            lines.append(f"gpu: {s.get('wire_errors', 0)} malformed and {s.get('cut_short', 0)} cut-short "
                         "message(s) from the injection library")
        return lines


class _HelloTap:
    """The receiver's sink: passes everything to the recording, keeping each
    process's HELLO (what the library could do there) for the summary."""

    def __init__(self, ctx: RecorderContext, hellos: dict):
        self.ctx, self.hellos = ctx, hellos

    def write_ring(self, ring: int, data: bytes) -> None:
        self.ctx.write_ring(ring, data)

    def write_meta(self, obj: dict) -> None:
        if obj.get("type") == "gpu_hello" and isinstance(obj.get("info"), dict):
            self.hellos[obj["pid"]] = {**self.hellos.get(obj["pid"], {}), **obj["info"]}
        self.ctx.write_meta(obj)
