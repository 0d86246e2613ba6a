"""What an event family is: one frozen descriptor that says everything about it.

Each family's descriptor lives with its code (timeline/core_families.py for
proc and sched, timeline/cuda/family.py, timeline/kctx/family.py), next to
its record header and dtype module (sched_records.h + sched_records.py,
cuda/records.h + cuda/records.py); the list of them is timeline/registry.py,
and every table the recorder, the CLI and the converters use is derived from
that list.  This module knows no family.

A descriptor names its plugin and converters as "module:Class" strings,
imported only when a recording or a conversion needs them: importing the
registry loads the descriptors and their dtype modules, no other family code,
and core modules never import family modules.
"""
from __future__ import annotations

import dataclasses
import enum
import importlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

MIB = 1 << 20


@dataclass(frozen=True)
class Ring:
    """One ring of records in the raw log (TL_RING_* id, unique, below TL_MAX_RINGS).

    The family's header defines the id, the kinds and the record struct; the
    dtype module of the same name beside it (cuda/records.h: cuda/records.py)
    mirrors them once (tests/test_layout.py checks both)."""
    id: int
    dtype: np.dtype            # the mirror, in the header's dtype module, of ...
    struct: str                # ... this C struct (checked against the objects' BTF)
    kinds: type[enum.IntEnum]  # record kinds: `kind` field value -> name in the summary
    map: str = ""              # the BPF ring buffer map; "" for records a plugin writes itself
    default_bytes: int = 0     # the map's max_entries in its .bpf.c (checked by tests/test_layout.py)
    header: str = ""           # the header defining it, relative to timeline/ ("cuda/records.h")


@dataclass(frozen=True)
class Family:
    name: str
    help: str                               # one line: what the family records (for `-e` help)
    rings: tuple[Ring, ...]
    # BPF side: its object (a file name in timeline/bpf) and the programs attached
    # by their SEC().  A family whose records come from elsewhere (a socket,
    # a sampler) has bpf_object="" and writes ring blocks from its plugin
    # (RecorderContext.write_ring).
    bpf_object: str = ""
    programs: tuple[str, ...] = ()          # attached by SEC() in BpfSession.attach
    plugin_programs: tuple[str, ...] = ()   # attached by the family's plugin (uprobes...)
    prepare: str = ""                       # "module:function"(BPFObject) called before load
    default_on: bool = True                 # in `-e`'s default (where `supported()` holds)
    always_on: bool = False                 # proc: the process tree every recording needs
    requires: str = ""                      # what `supported()` needs, for docs and messages
    supported: Callable[[], bool] = lambda: True  # can this kernel run it?
    options: type | None = None             # a dataclass of its `record` options (see option())
    plugin: str = ""                        # "module:Class", a recorder_plugins.RecorderPlugin
    converters: tuple[str, ...] = ()        # "module:Class", converters.families.FamilyConverter

    @property
    def ring_option(self) -> str:
        """The setting that resizes this family's ring(s)."""
        return f"--buffer-size {self.name}=MiB"

    def default_options(self):
        return self.options() if self.options else None


def option(default: Any, *flags: str, help: str, **click_kwargs) -> Any:
    """A field of a family's options dataclass: its one default, and the
    `timeline record` option that sets it (click.option's arguments)."""
    return dataclasses.field(default=default, metadata={"flags": flags, "help": help, "click": click_kwargs})


def option_fields(options: type | None) -> list[dataclasses.Field]:
    return list(dataclasses.fields(options)) if options else []


def load_spec(spec: str):
    """'module:Name' -> the object."""
    mod, name = spec.split(":")
    return getattr(importlib.import_module(mod), name)
