"""Load timeline's BPF objects as one session: shared maps, attach, teardown.

What to load comes from the family descriptors (timeline/registry.py):
``proc`` (process tree: fork/exec/exit/rename, owns the `tracked` and `drops`
maps) is always loaded first; every other family with a BPF object adds it the
same way.  Families without one (records from a plugin) load nothing here.
"""
from __future__ import annotations

import ctypes
import os
import struct
from importlib import resources

import numpy as np

from . import events, libbpf
from .btf_layout import section_globals
from .family import Family, load_spec
from .registry import FAMILIES
from .ring_reader import RingReader

BPF_DIR = str(resources.files("timeline") / "bpf")


SHARED_MAPS = ("tracked", "drops", "hook_args")
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
        families = list(dict.fromkeys(["proc", *families]))  # proc first, each family once
        self.families: list[Family] = [FAMILIES[f] for f in families]
        self.bpf_families = [f for f in self.families if f.bpf_object]
        self.objects: dict[str, libbpf.BPFObject] = {}
        self.readers: dict[int, RingReader] = {}
        self.ncpu = libbpf.num_possible_cpus()
        try:
            self._load(launcher_tgid, ring_sizes or {}, rodata or {})
        except BaseException:
            self.close()
            raise

    def _load(self, launcher_tgid: int, ring_sizes: dict[str, int], rodata: dict[str, dict[str, int]]) -> None:
        """ring_sizes: family -> bytes of its ring(s); others keep their .bpf.c size."""
        shared: dict[str, int] = {}
        for fam in self.bpf_families:
            path = object_path(fam.bpf_object)
            obj = libbpf.BPFObject(path)
            self.objects[fam.name] = obj
            if fam.prepare:  # e.g. program attach types only known at run time
                load_spec(fam.prepare)(obj)
            if fam.name in ring_sizes:
                for ring in fam.rings:
                    obj.map(ring.map).set_max_entries(ring_sizes[fam.name])
            values = dict(rodata.get(fam.name, {}))
            if fam.name == "proc":
                values["launcher_tgid"] = launcher_tgid
                values["untrack_on_switch"] = int(any(f.name == "sched" for f in self.families))
            if values:
                where = section_globals(path)
                missing = [k for k in values if k not in where]
                if missing:
                    raise libbpf.BPFError(f"{fam.bpf_object} has no const volatile {missing[0]!r}")
                obj.set_rodata({k: (*where[k], v) for k, v in values.items()})
            for name in SHARED_MAPS:
                if name in shared:
                    obj.map(name).reuse_fd(shared[name])
            obj.load()
            for name in SHARED_MAPS:
                shared.setdefault(name, obj.map(name).fd)
            for ring in fam.rings:
                m = obj.map(ring.map)
                self.readers[ring.id] = RingReader(m.fd, m.max_entries, ring.dtype)
        self._proc = self.objects["proc"]
        self.tracked = self._proc.map("tracked")

    def attach(self) -> None:
        ensure_tracefs()
        # proc first, so the tree is followed before anything else fires.
        for fam in self.bpf_families:
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

    def _bpf_rings(self):
        """(family, ring) of every BPF ring loaded."""
        return [(f, r) for f in self.bpf_families for r in f.rings]

    def drops(self) -> dict[str, list[int]]:
        """Per-CPU counts of records lost (ring full or refused), by family name."""
        out: dict[str, list[int]] = {}
        for f, r in self._bpf_rings():
            lost = [a + b for a, b in zip(self._drop_slot(events.DROP_FULL + r.id),
                                          self._drop_slot(events.DROP_REFUSED + r.id))]
            out[f.name] = [a + b for a, b in zip(out[f.name], lost)] if f.name in out else lost
        return out

    def drop_causes(self) -> dict[str, dict]:
        """Per family: per-CPU records lost to a full ring (`full`) and refused
        by the kernel with room left (`refused`), per-CPU reserves refused once
        with room left then retried successfully (`retried`, nothing lost),
        the most bytes pending at a refusal (`refused_max_pending`) and the
        ring size (`ring_bytes`)."""
        # Keyed by family: a family of several rings would need its ring named here.
        out = {}
        for f, r in self._bpf_rings():
            out[f.name] = {
                "full": self._drop_slot(events.DROP_FULL + r.id),
                "refused": self._drop_slot(events.DROP_REFUSED + r.id),
                "retried": self._drop_slot(events.DROP_RETRIED + r.id),
                "refused_max_pending": max(self._drop_slot(events.DROP_FILL + r.id)),
                "ring_bytes": self.readers[r.id].size,
            }
        return out

    def close(self) -> None:
        for r in self.readers.values():
            r.close()
        self.readers.clear()
        for obj in self.objects.values():
            obj.close()
        self.objects.clear()
