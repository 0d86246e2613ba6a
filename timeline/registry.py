"""The list of event families, and every table derived from it.

Adding a family is one line in FAMILY_LIST (docs/architecture.md walks
through the rest).  Importing this module imports the descriptors only
(timeline/*/family.py), never a family's plugin or converter.  This module
and the families' packages are the only ones that name a family
(tests/unit/test_family_registry.py checks the others).
"""
from __future__ import annotations

import os

from .core_families import PROC, SCHED
from .cuda.family import CUDA
from .events import MAX_RINGS
from .family import CAPTURE_RANGE_FIELD, CaptureRange, Family, Ring, load_spec, option_fields
from .gpu.family import GPU
from .kctx.family import BLOCK, COUNTERS, IOCTL
from .memory.family import CGROUP, MEM
from .net.family import NET
from .pystack.family import PYSTACK

EXTRA_FAMILIES_VAR = "TIMELINE_EXTRA_FAMILIES"


def _extra_families() -> tuple[Family, ...]:
    """Descriptors of families outside this tree, for tests of a family package
    (tests/system/test_family_toy.py): TIMELINE_EXTRA_FAMILIES="module:NAME,...".
    Ignored under sudo (SUDO_UID set): root would import code the invoking
    user names."""
    specs = os.environ.get(EXTRA_FAMILIES_VAR, "")
    if not specs or "SUDO_UID" in os.environ:
        return ()
    return tuple(load_spec(s.strip()) for s in specs.split(",") if s.strip())


# Order: how `-e`'s default and help list them.
FAMILY_LIST: tuple[Family, ...] = (PROC, SCHED, IOCTL, BLOCK, COUNTERS, CUDA, GPU, PYSTACK, NET,
                                   MEM, CGROUP,  # memory pressure, container limits
                                   *_extra_families())

FAMILIES: dict[str, Family] = {f.name: f for f in FAMILY_LIST}
# families whose events make a trace set's chunk the one `view` opens first
MAIN_ACTIVITY: tuple[str, ...] = tuple(f.name for f in FAMILY_LIST if f.main_activity)
# Families on unless `-e` says otherwise: default_on, and the kernel can run them.
DEFAULT_EVENTS: tuple[str, ...] = tuple(f.name for f in FAMILY_LIST
                                        if f.default_on and not f.always_on and f.supported())
RINGS: dict[int, Ring] = {r.id: r for f in FAMILY_LIST for r in f.rings}
RING_FAMILY: dict[int, Family] = {r.id: f for f in FAMILY_LIST for r in f.rings}
RING_NAMES: dict[int, str] = {rid: f.name for rid, f in RING_FAMILY.items()}
RING_DTYPES = {rid: r.dtype for rid, r in RINGS.items()}
# (ring id, record kind) -> the name in the recorder's summary
KIND_NAMES: dict[tuple[int, int], str] = {(r.id, int(k)): k.name for r in RINGS.values() for k in r.kinds}
# family -> "module:Class" of its recorder plugin
PLUGINS: dict[str, str] = {f.name: f.plugin for f in FAMILY_LIST if f.plugin}
# converters of the families' own rings, in registry order
CONVERTERS: tuple[str, ...] = tuple(c for f in FAMILY_LIST for c in f.converters)
# rings a capture window never cuts: the process tree (always_on)
UNCUT_RINGS: frozenset[int] = frozenset(r.id for f in FAMILY_LIST if f.always_on for r in f.rings)
# raw log header fields the families' plugins write -> their JSON type (checked when a log is read)
HEADER_TYPES: dict[str, type] = {k: t for f in FAMILY_LIST for k, t in f.header_fields}
# (family, kind) of every `--capture-range` kind
CAPTURE_RANGES: tuple[tuple[Family, CaptureRange], ...] = tuple((f, c) for f in FAMILY_LIST for c in f.capture_ranges)
# the family whose options hold `--capture-range` (one option; its kinds come from any family)
CAPTURE_RANGE_OWNER: str = next((f.name for f in FAMILY_LIST
                                 if CAPTURE_RANGE_FIELD in {fld.name for fld in option_fields(f.options)}), "")
CHECK_DATA = tuple(d for f in FAMILY_LIST for d in f.check_data)
RANK_COUNTS = tuple(c for f in FAMILY_LIST for c in f.rank_counts)
# "module:function" of each family's always_keep, by ring id
ALWAYS_KEEP: dict[int, str] = {r.id: f.always_keep for f in FAMILY_LIST if f.always_keep for r in f.rings}


def ring_id_conflicts(families=FAMILY_LIST, max_rings: int = MAX_RINGS) -> list[str]:
    """What is wrong with the families' ring ids, one line each (none: []).

    An id is 1 .. max_rings - 1 (TL_MAX_RINGS: it indexes the drops map) and
    claimed by one ring; RINGS above would silently keep only the last one."""
    problems, owner = [], {}
    for fam in families:
        for ring in fam.rings:
            if not 0 < ring.id < max_rings:
                problems.append(f"{fam.name}: ring id {ring.id} is outside 1..{max_rings - 1} "
                                f"(TL_MAX_RINGS in timeline/bpf/events.h)")
            elif ring.id in owner:
                problems.append(f"ring id {ring.id} is claimed by both {owner[ring.id]} and {fam.name}")
            else:
                owner[ring.id] = fam.name
    return problems


def events_help() -> str:
    """The `-e` help text: every family, what it records."""
    return ("Event families, comma separated (proc is always on). Known: "
            + "; ".join(f"{f.name}: {f.help}" for f in FAMILY_LIST if not f.always_on) + ".")


def family_options(values: dict) -> dict:
    """Family name -> its options dataclass, from the values of all `record`
    options (missing ones keep their default)."""
    out = {}
    for f in FAMILY_LIST:
        if f.options:
            out[f.name] = f.options(**{fld.name: values[fld.name] for fld in option_fields(f.options)
                                       if fld.name in values})
    return out


def options_of(cfg, name: str):
    """The options of family `name` in a RecordConfig (defaults where unset)."""
    return cfg.options.get(name) or FAMILIES[name].default_options()


def capture_range_of(cfg) -> str:
    """The `--capture-range` value of a RecordConfig ("none" without one)."""
    if not CAPTURE_RANGE_OWNER:
        return "none"
    return getattr(options_of(cfg, CAPTURE_RANGE_OWNER), CAPTURE_RANGE_FIELD)


def capture_range_kind(value: str) -> tuple[Family, CaptureRange] | None:
    """The family providing a `--capture-range` value, and its kind (None: none does)."""
    return next(((f, c) for f, c in CAPTURE_RANGES if c.matches(value)), None)
