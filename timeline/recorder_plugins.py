"""Hooks for event families that need user-space work while recording.

Most families are BPF programs attached by their SEC() and need nothing
here.  Some need more: CUDA probes find libraries and attach uprobes to
them (and keep looking as new ones are mapped); samplers read NVML or /proc
on a timer.  Such a family provides a RecorderPlugin, listed in PLUGINS.

Threading: `before_launch`, `on_target` and `stop` run on the main thread,
`tick` on the consumer thread after each drain.  Anything written to the raw
log goes through the context, which serialises writers.
"""
from __future__ import annotations

import importlib
import threading
import time

from .rawlog import RawLogWriter

# family name -> "module:Class"
PLUGINS: dict[str, str] = {
    "cuda": "timeline.cuda.plugin:CudaPlugin",
    "ioctl": "timeline.kctx.plugins:IoctlPlugin",
    "counters": "timeline.kctx.plugins:CountersPlugin",
}


class RecorderContext:
    def __init__(self, cfg, session, writer: RawLogWriter, lock: threading.Lock):
        self.cfg = cfg
        self.session = session        # BpfSession: objects, tracked map
        self._writer = writer
        self._lock = lock
        self.target_pids: list[int] = []  # launched pid, or the attached tree's pids
        self.summary: list[str] = []      # lines for the end-of-recording summary

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
            self._writer.write_ring(ring, data)


class RecorderPlugin:
    family = ""

    def __init__(self, cfg):
        self.cfg = cfg

    def preflight(self) -> None:
        """Checks before anything is loaded; raise errors.UserError."""

    def header(self) -> dict:
        """Extra fields for the raw log header."""
        return {}

    def before_launch(self, ctx: RecorderContext) -> None:
        """BPF is loaded and attached; the target has not started yet."""

    def on_target(self, ctx: RecorderContext) -> None:
        """ctx.target_pids is known (launched, or the attached tree)."""

    def tick(self, ctx: RecorderContext) -> None:
        """Consumer thread, after each drain: keep it cheap."""

    def stop(self, ctx: RecorderContext) -> None:
        """Recording ends: before the final drain and the END block."""


def load(families, cfg) -> list[RecorderPlugin]:
    out = []
    for fam in families:
        spec = PLUGINS.get(fam)
        if spec:
            mod, cls = spec.split(":")
            out.append(getattr(importlib.import_module(mod), cls)(cfg))
    return out
