"""The list of event families, and every table derived from it.

Adding a family is one line in FAMILY_LIST (docs/architecture.md walks
through the rest).  Importing this module imports the descriptors only
(timeline/*/family.py), never a family's plugin or converter.
"""
from __future__ import annotations

from .core_families import PROC, SCHED
from .cuda.family import CUDA
from .events import MAX_RINGS
from .family import Family, Ring, option_fields
from .gpu.family import GPU
from .kctx.family import BLOCK, COUNTERS, IOCTL
from .pystack.family import PYSTACK

# Order: how `-e`'s default and help list them.
FAMILY_LIST: tuple[Family, ...] = (PROC, SCHED, IOCTL, BLOCK, COUNTERS, CUDA, GPU, PYSTACK)

FAMILIES: dict[str, Family] = {f.name: f for f in FAMILY_LIST}
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
