"""ioctl records -> slices on the calling thread's track.

Each slice: name = decoded request ('NV_ESC_RM_CONTROL', 'UVM_MAP_EXTERNAL_ALLOCATION',
'ioctl(TCGETS)', 'ioctl'), category 'ioctl', args fd, path, request (hex),
ret, and for NVIDIA calls rm_cmd / rm_class (hex) when the argument carried
one, for other files the _IOC fields dir, type, nr, size.
Ioctls that were only counted become a cumulative per-process counter
'ioctl.other_calls' and, at the end, one 'ioctl counts' instant per process
(category 'ioctl_summary') whose args are the counts by request.
"""
from __future__ import annotations

import numpy as np

from .. import events as ev
from ..converters.families import FamilyConverter
from . import ioctl_records
from .devices import file_path
from .ioctl_names import GENERIC, NV_ALLOC_ESCAPES, NV_ESC_RM_CONTROL, generic_name, ioc_decode, nvidia_name

TOP_REQUESTS = 20  # per-request args on the summary instant


class IoctlConverter(FamilyConverter):
    rings = (ioctl_records.RING_IOCTL,)
    metas = ("kctx_devices", "ioctl_counts")

    def __init__(self, model):
        super().__init__(model)
        self.devices: dict[str, str] = {}
        self.final_counts: dict[int, dict[int, int]] = {}
        self.counts_ts = 0

    def scan_meta(self, meta: dict) -> None:
        if meta["type"] == "kctx_devices":
            for k, v in (meta.get("devices") or {}).items():
                self.devices.setdefault(k, v)

    def emit_ring(self, sink, ring, recs) -> None:
        recs = recs[np.argsort(recs["ts"], kind="stable")]
        cols = {k: recs[k].tolist() for k in ("ts", "dur", "ret", "ino", "tid", "tgid", "fd", "request", "rdev",
                                               "detail", "mode", "flags", "esc", "name", "parent")}
        for i in range(recs.size):
            flags, req = cols["flags"][i], cols["request"][i]
            name_s, parent_s = ev.cstr(cols["name"][i]), ev.cstr(cols["parent"][i])
            path = file_path(cols["mode"][i], cols["rdev"][i], cols["ino"][i], name_s, parent_s, self.devices)
            args = {"fd": cols["fd"][i], "path": path, "request": f"{req:#x}", "ret": cols["ret"][i]}
            if flags & ioctl_records.IOF_NVIDIA:
                esc = cols["esc"][i]
                name = nvidia_name(req, esc, name_s.startswith("nvidia-uvm"))
                if flags & ioctl_records.IOF_DETAIL:
                    key = "rm_cmd" if esc == NV_ESC_RM_CONTROL else "rm_class" if esc in NV_ALLOC_ESCAPES else "detail"
                    args[key] = f"{cols['detail'][i]:#x}"
                if flags & ioctl_records.IOF_XFER:
                    args["xfer"] = True
            else:
                name = generic_name(req)
                args.update(ioc_decode(req))
            sink.slice(cols["ts"][i], cols["dur"][i], cols["tid"][i], cols["tgid"][i], name, "ioctl", args)

    def emit_meta(self, sink, meta: dict) -> None:
        if meta["type"] != "ioctl_counts":
            return
        per_pid: dict[int, dict[int, int]] = {}
        for tgid, req, n in meta.get("counts") or ():
            per_pid.setdefault(int(tgid), {})[int(req)] = int(n)
        ts = int(meta["ts"])
        for tgid, reqs in per_pid.items():
            if tgid in self.model.processes:
                sink.counter("ioctl.other_calls", ts, sum(reqs.values()), pid=tgid)
        self.final_counts, self.counts_ts = per_pid, ts

    def finish(self, sink) -> None:
        for tgid, reqs in self.final_counts.items():
            if tgid not in self.model.processes:
                continue
            args: dict = {"total": sum(reqs.values())}
            for req, n in sorted(reqs.items(), key=lambda x: -x[1])[:TOP_REQUESTS]:
                args[GENERIC.get(req) or f"{req:#x}"] = n
            sink.instant(self.counts_ts, tgid, tgid, "ioctl counts", "ioctl_summary", args)
