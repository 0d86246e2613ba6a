"""Recorder plugins of the kernel-context families: ioctl and counters.

ioctl: sets the BPF filter (--ioctl gpu|all), writes the /dev snapshot that
names device fds, and reads the per-(process, request) counts of ioctls
that were not recorded.  counters: a sampler thread reading /proc and NVML.
"""
from __future__ import annotations

import struct

from ..errors import UserError
from ..recorder_plugins import PeriodicSampler, RecorderPlugin
from .devices import scan_dev
from .family import IOCTL_MODES, MIN_SAMPLE_INTERVAL, sample_interval_ok
from .ioctl_names import generic_name
from .samplers import Nvml, ProcSampler

COUNTS_EVERY_S = 1.0


class IoctlPlugin(RecorderPlugin):
    family = "ioctl"

    def __init__(self, cfg, options):
        super().__init__(cfg, options)
        self.mode = options.ioctl_mode
        self._devices: dict[str, str] = {}
        self._last_counts: dict = {}
        self._counts_at = 0

    def preflight(self) -> None:
        if self.mode not in IOCTL_MODES:
            raise UserError(f"--ioctl must be one of {', '.join(IOCTL_MODES)}, not {self.mode!r}")

    def header(self) -> dict:
        return {"ioctl_mode": self.mode}

    def before_launch(self, ctx) -> None:
        obj = ctx.session.objects["ioctl"]
        obj.map("ioctl_config").update(struct.pack("<I", 0), struct.pack("<I", int(self.mode == "all")))
        self._write_devices(ctx)

    def _write_devices(self, ctx) -> None:
        devs = scan_dev()
        new = {k: v for k, v in devs.items() if self._devices.get(k) != v}
        if new:
            self._devices.update(new)
            ctx.write_meta({"type": "kctx_devices", "ts": ctx.now_ns(), "devices": new})

    def _write_counts(self, ctx) -> None:
        m = ctx.session.objects["ioctl"].map("ioctl_counts")
        counts = {struct.unpack("<II", k): struct.unpack("<Q", v)[0] for k, v in m.items()}
        if counts != self._last_counts:
            self._last_counts = counts
            ctx.write_meta({"type": "ioctl_counts", "ts": ctx.now_ns(),
                            "counts": [[tg, req, n] for (tg, req), n in sorted(counts.items())]})

    def tick(self, ctx) -> None:
        now = ctx.now_ns()
        if now - self._counts_at >= COUNTS_EVERY_S * 1e9:
            self._counts_at = now
            self._write_counts(ctx)

    def stop(self, ctx) -> None:
        self._write_devices(ctx)  # nodes created during the run (nvidia-uvm is, on first CUDA use)
        self._write_counts(ctx)
        if self.mode == "gpu" and self._last_counts:
            by_req: dict[int, int] = {}
            for (_, req), n in self._last_counts.items():
                by_req[req] = by_req.get(req, 0) + n
            top = sorted(by_req.items(), key=lambda x: -x[1])[:3]
            ctx.summary.append(
                f"ioctl: {sum(by_req.values()):,} ioctls on non-NVIDIA files counted, not recorded ("
                + ", ".join(f"{generic_name(r)} {n:,}" for r, n in top) + "); --ioctl all records them")


class CountersPlugin(RecorderPlugin):
    family = "counters"

    def __init__(self, cfg, options):
        super().__init__(cfg, options)
        self.interval = float(options.sample_interval or 0)
        self.nvml: Nvml | None = None
        self.procs = ProcSampler()
        self.sampler = PeriodicSampler("timeline-sampler", self.interval, self.sample)

    def preflight(self) -> None:
        if not sample_interval_ok(self.interval):  # options built in code skip the CLI's check
            raise UserError(f"--sample-interval {self.interval:g}: give a finite number of seconds, at least "
                            f"{MIN_SAMPLE_INTERVAL:g} (0 turns the samplers off)")

    def header(self) -> dict:
        return {"sample_interval": self.interval}

    def on_target(self, ctx) -> None:
        if not self.interval:
            return
        self.nvml = Nvml()
        if not self.nvml.available:
            ctx.summary.append(f"counters: no GPU counters: NVML unavailable ({self.nvml.reason})")
        ctx.write_meta({"type": "kctx_samplers", "ts": ctx.now_ns(), "interval": self.interval,
                        "nvml": self.nvml.available, "reason": self.nvml.reason,
                        "gpus": len(self.nvml.handles) if self.nvml.available else 0})
        self.sampler.start(ctx)

    def sample(self, ctx) -> None:
        pids = set(ctx.processes)  # kept current from the proc ring: no map walk per sample
        rec = {"type": "kctx_samples", "ts": ctx.now_ns(), "proc": self.procs.sample(pids)}
        if self.nvml is not None and self.nvml.available:
            rec["gpu"], rec["gpu_proc"] = self.nvml.sample(pids)
        ctx.write_meta(rec)

    def stop(self, ctx) -> None:
        if not self.sampler.started:
            return
        self.sampler.stop()
        self.sample(ctx)  # a last point, so rates cover the end of the run
        self.procs.close()
        if self.nvml is not None:
            self.nvml.close()
        if self.sampler.error:
            ctx.summary.append(f"warning: counters: sampling stopped early: {self.sampler.error}")
