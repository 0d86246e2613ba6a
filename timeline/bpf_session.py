"""Load timeline's BPF objects as one session: shared maps, attach, teardown.

Families map to objects: ``proc`` (process tree: fork/exec/exit/rename, owns
the `tracked` and `drops` maps) is always loaded; ``sched`` adds context
switches and wakeups.  Later families add objects the same way.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import struct
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from . import events, libbpf
from .btf_layout import section_globals
from .ring_reader import RingReader

BPF_DIR = str(resources.files("timeline") / "bpf")


@dataclass
class Family:
    name: str
    object: str                 # file name in timeline/bpf
    ring_map: str
    ring_id: int
    dtype: np.dtype
    programs: list[str] = field(default_factory=list)  # attached by their SEC() in attach()
    # Other programs of the object (uprobes...) are attached by the family's
    # recorder plugin (timeline/recorder_plugins.py) through session.objects.
    plugin_programs: list[str] = field(default_factory=list)  # those, by name (checked by test_layout)
    prepare: str = ""  # "module:function" called with the opened BPFObject before load


FAMILIES = {
    "proc": Family("proc", "proc.bpf.o", "proc_ring", events.RING_PROC, events.PROC_EVENT,
                   ["tl_fork", "tl_exec", "tl_exit", "tl_rename"]),
    "sched": Family("sched", "sched.bpf.o", "sched_ring", events.RING_SCHED, events.SCHED_EVENT,
                    ["tl_switch", "tl_waking", "tl_wakeup_new"]),
    # CUDA runtime/driver/NCCL uprobes, attached by timeline.cuda.plugin
    "cuda": Family("cuda", "cuda.bpf.o", "cuda_ring", events.RING_CUDA, events.CUDA_EVENT, [],
                   ["tl_cuda_entry", "tl_cuda_enter", "tl_cuda_exit"], "timeline.cuda.attach:prepare"),
    # kernel context (timeline.kctx): ioctls, block requests, exit totals + samplers
    "ioctl": Family("ioctl", "ioctl.bpf.o", "ioctl_ring", events.RING_IOCTL, events.IOCTL_EVENT,
                    ["tl_ioctl_enter", "tl_ioctl_exit"]),
    "block": Family("block", "block.bpf.o", "block_ring", events.RING_BLOCK, events.BLOCK_EVENT,
                    ["tl_blk_insert", "tl_blk_issue", "tl_blk_done"]),
    "counters": Family("counters", "counters.bpf.o", "counters_ring", events.RING_COUNTERS,
                       events.COUNTERS_EVENT, ["tl_cnt_exit"]),
}
SHARED_MAPS = ("tracked", "drops")
_TASK = struct.Struct("<II")  # struct tl_task {tgid, flags}


TRACEFS = "/sys/kernel/tracing"


def ensure_tracefs() -> None:
    """Tracepoint attach reads event ids from tracefs; mount it if absent."""
    if os.path.isdir(os.path.join(TRACEFS, "events")) or os.path.isdir("/sys/kernel/debug/tracing/events"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"nodev", TRACEFS.encode(), b"tracefs", 0, None) != 0:
        err = ctypes.get_errno()
        raise libbpf.BPFError(f"tracefs is not mounted at {TRACEFS} and mounting it failed: {os.strerror(err)}")


def object_path(name: str) -> str:
    return os.path.join(os.environ.get("TIMELINE_BPF_DIR", BPF_DIR), name)


class BpfSession:
    def __init__(self, families: list[str], *, launcher_tgid: int = 0, ring_sizes: dict[str, int] | None = None,
                 rodata: dict[str, dict[str, int]] | None = None):
        """rodata: family -> {const volatile global: value}, set before load."""
        if "proc" not in families:
            families = ["proc", *families]
        self.families = [FAMILIES[f] for f in families]
        self.objects: dict[str, libbpf.BPFObject] = {}
        self.readers: dict[int, RingReader] = {}
        self.ncpu = libbpf.num_possible_cpus()
        try:
            self._load(launcher_tgid, ring_sizes or {}, rodata or {})
        except BaseException:
            self.close()
            raise

    def _load(self, launcher_tgid: int, ring_sizes: dict[str, int], rodata: dict[str, dict[str, int]]) -> None:
        shared: dict[str, int] = {}
        for fam in self.families:
            path = object_path(fam.object)
            obj = libbpf.BPFObject(path)
            self.objects[fam.name] = obj
            if fam.prepare:  # e.g. program attach types only known at run time
                mod, fn = fam.prepare.split(":")
                getattr(importlib.import_module(mod), fn)(obj)
            if fam.name in ring_sizes:
                obj.map(fam.ring_map).set_max_entries(ring_sizes[fam.name])
            values = dict(rodata.get(fam.name, {}))
            if fam.name == "proc":
                values["launcher_tgid"] = launcher_tgid
                values["untrack_on_switch"] = int(any(f.name == "sched" for f in self.families))
            if values:
                where = section_globals(path)
                missing = [k for k in values if k not in where]
                if missing:
                    raise libbpf.BPFError(f"{fam.object} has no const volatile {missing[0]!r}")
                obj.set_rodata({k: (*where[k], v) for k, v in values.items()})
            for name in SHARED_MAPS:
                if name in shared:
                    obj.map(name).reuse_fd(shared[name])
            obj.load()
            for name in SHARED_MAPS:
                shared.setdefault(name, obj.map(name).fd)
            ring = obj.map(fam.ring_map)
            self.readers[fam.ring_id] = RingReader(ring.fd, ring.max_entries, fam.dtype)
        self._proc = self.objects["proc"]
        self.tracked = self._proc.map("tracked")

    def attach(self) -> None:
        ensure_tracefs()
        # proc first, so the tree is followed before anything else fires.
        for fam in self.families:
            for prog in fam.programs:
                self.objects[fam.name].attach(prog)

    def detach(self) -> None:
        for obj in self.objects.values():
            obj.detach_all()

    def track(self, tid: int, tgid: int) -> None:
        self.tracked.update(struct.pack("<I", tid), _TASK.pack(tgid, 0))

    def untrack(self, tid: int) -> None:
        self.tracked.delete(struct.pack("<I", tid))

    def is_tracked(self, tid: int) -> bool:
        return self.tracked.lookup(struct.pack("<I", tid)) is not None

    def arm_launch(self, on: bool) -> None:
        self._proc.map("launch_armed").update(struct.pack("<I", 0), struct.pack("<I", int(on)))

    def _drop_slot(self, slot: int) -> list[int]:
        raw = self._proc.map("drops").lookup(struct.pack("<I", slot), 8 * self.ncpu)
        return np.frombuffer(raw, "<u8").tolist() if raw else [0] * self.ncpu

    def drops(self) -> dict[str, list[int]]:
        """Per-CPU counts of records lost (ring full or refused), by family name."""
        return {f.name: [a + b for a, b in zip(self._drop_slot(events.DROP_FULL + f.ring_id),
                                               self._drop_slot(events.DROP_REFUSED + f.ring_id))]
                for f in self.families}

    def drop_causes(self) -> dict[str, dict]:
        """Per family: per-CPU records lost to a full ring (`full`) and refused
        by the kernel with room left (`refused`), per-CPU reserves refused once
        with room left then retried successfully (`retried`, nothing lost),
        the most bytes pending at a refusal (`refused_max_pending`) and the
        ring size (`ring_bytes`)."""
        out = {}
        for f in self.families:
            out[f.name] = {
                "full": self._drop_slot(events.DROP_FULL + f.ring_id),
                "refused": self._drop_slot(events.DROP_REFUSED + f.ring_id),
                "retried": self._drop_slot(events.DROP_RETRIED + f.ring_id),
                "refused_max_pending": max(self._drop_slot(events.DROP_FILL + f.ring_id)),
                "ring_bytes": self.readers[f.ring_id].size,
            }
        return out

    def close(self) -> None:
        for r in self.readers.values():
            r.close()
        self.readers.clear()
        for obj in self.objects.values():
            obj.close()
        self.objects.clear()
