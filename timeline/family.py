"""What an event family is: one frozen descriptor that says everything about it.

Each family's descriptor lives with its code (timeline/core_families.py for
proc and sched, timeline/cuda/family.py, timeline/kctx/family.py), next to
its record header and dtype module (sched_records.h + sched_records.py,
cuda/records.h + cuda/records.py); the list of them is timeline/registry.py,
and every table the recorder, the CLI and the converters use is derived from
that list.  This module knows no family.

A descriptor names its plugin, converters and hooks as "module:Name" strings,
imported only when a recording, a conversion or doctor needs them: importing
the registry loads the descriptors and their dtype modules, no other family
code, and core modules never import family modules.  What the core needs to
know of a family (its timestamp field, capture ranges, rows kept outside a
window, check data, per-rank counts, header fields, doctor rows) is a field
here, so that only the registry and the families' packages name a family
(docs/architecture.md, "Adding a family").
"""
from __future__ import annotations

import dataclasses
import enum
import fnmatch
import importlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

MIB = 1 << 20
# The options field (of one family's options) that holds `--capture-range`:
# one option, whose kinds any family may provide (Family.capture_ranges).
CAPTURE_RANGE_FIELD = "capture_range"


@dataclass(frozen=True)
class Ring:
    """One ring of records in the raw log (TL_RING_* id, unique, below TL_MAX_RINGS).

    The family's header defines the id, the kinds and the record struct; the
    dtype module of the same name beside it (cuda/records.h: cuda/records.py)
    mirrors them once (tests/unit/test_layout.py checks both)."""
    id: int
    dtype: np.dtype            # the mirror, in the header's dtype module, of ...
    struct: str                # ... this C struct (checked against the objects' BTF)
    kinds: type[enum.IntEnum]  # record kinds: `kind` field value -> name in the summary
    map: str = ""              # the BPF ring buffer map; "" for records a plugin writes itself
    default_bytes: int = 0     # the map's max_entries in its .bpf.c (checked by tests/unit/test_layout.py)
    header: str = ""           # the header defining it, relative to timeline/ ("cuda/records.h")
    ts_field: str = "ts"       # the field that times a record (capture windows cut by it, the trace spans it)


@dataclass(frozen=True)
class CheckData:
    """Data in a trace that `timeline check`'s checks may need (Check.families
    names it): how to see it is there, and what it is when it is not."""
    name: str   # the name the catalog's checks use ("block_io")
    sql: str    # a boolean SQL expression over the trace ("exists(select 1 from slice where ...)")
    help: str   # what it is, for "no ... in this trace"
    # The same test in the converter's terms, so that a trace set's index can say "absent" with no
    # chunk loaded (timeline check SET): any slice or instant of these categories, any counter track
    # whose name matches this glob, any stack sample. All empty: only the SQL can tell.
    categories: tuple[str, ...] = ()
    counters: str = ""
    samples: bool = False

    def seen(self, categories, counters, samples: bool):
        """Whether a trace with these slice categories, counter names and samples has this data;
        None where only the SQL can tell."""
        if not (self.categories or self.counters or self.samples):
            return None
        return (any(c in categories for c in self.categories)
                or bool(self.counters and any(fnmatch.fnmatchcase(n, self.counters) for n in counters))
                or (self.samples and samples))


@dataclass(frozen=True)
class CaptureRange:
    """A kind of `--capture-range` (what opens and closes the recording) a family provides.

    Cut while recording (the default): the family's plugin finds the window's
    edges in its records (RecorderPlugin.capture_range / capture_marks).  Cut
    at conversion (`window` set): the recording keeps everything, and the
    conversion asks `window(raw fd, name, value)` for ((from_ns, to_ns) or
    None, a note for the user), then keeps the records inside it
    (timeline/capture_cut.py)."""
    kind: str                   # "cudaProfilerApi"; ending in ":" when it takes a name ("nvtx:" for nvtx:NAME)
    launched_only: bool = False  # only a launched command can have it (not --pid)
    window: str = ""            # "module:function": the window derived from the records, at conversion

    def matches(self, value: str) -> bool:
        if self.kind.endswith(":"):
            return value.startswith(self.kind) and len(value) > len(self.kind)
        return value == self.kind


@dataclass(frozen=True)
class RankCount:
    """A number per ranked process on the recorder's per-rank summary lines
    (timeline/rank_summary.py): the records of `ring` that `counted` marks,
    per value of their `pid_field`.  Shown whether or not the family was recorded."""
    label: str                                     # "CUDA/NCCL calls"
    ring: int
    counted: Callable[[np.ndarray], np.ndarray]    # decoded records -> bool mask
    pid_field: str = "tgid"


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
    always_on: bool = False                 # proc: the process tree every recording needs (never cut by a window)
    main_activity: bool = False             # the work a user opens a trace for (CUDA, GPU): `view SET` opens
                                            # the first chunk busy with it
    requires: str = ""                      # what `supported()` needs, for docs and messages
    supported: Callable[[], bool] = lambda: True  # can this kernel run it?
    options: type | None = None             # a dataclass of its `record` options (see option())
    plugin: str = ""                        # "module:Class", a recorder_plugins.RecorderPlugin
    converters: tuple[str, ...] = ()        # "module:Class", converters.families.FamilyConverter
    # Hooks that core modules call without naming the family (docs/architecture.md):
    header_fields: tuple[tuple[str, type], ...] = ()  # raw log header fields its plugin writes, and their JSON type
    capture_ranges: tuple[CaptureRange, ...] = ()     # `--capture-range` kinds it provides
    always_keep: str = ""                   # "module:function"(ring, rows) -> bool mask | None: rows of its
    #                                         rings kept outside any capture window (capture.as_rows rows)
    check_data: tuple[CheckData, ...] = ()  # what its converters put in a trace that checks may need
    rank_counts: tuple[RankCount, ...] = ()  # numbers per rank for the recorder's summary
    doctor: str = ""                        # "module:Class", a doctor_checks.FamilyDoctor: its `timeline doctor` rows

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
