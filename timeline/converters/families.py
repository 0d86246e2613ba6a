"""Registry of converters for event families beyond sched and proc.

A family converter receives, in the first pass, the records of its rings
and the META blocks of its types (to learn names, mappings, ...), and in the
second pass writes what it wants through a TrackSink (interface.py), the
same code serving the Perfetto and the Chrome JSON output.

To add a family: subclass FamilyConverter in its own module and name it, as
"module:Class", in the family's descriptor (Family.converters).
"""
from __future__ import annotations

import numpy as np

from ..family import load_spec
from ..registry import CONVERTERS
from .interface import TrackSink

REGISTRY: tuple[str, ...] = CONVERTERS  # every family's converters, from the descriptors


class FamilyConverter:
    rings: tuple[int, ...] = ()     # ring ids whose records this family converts
    metas: tuple[str, ...] = ()     # META "type" values it wants to see

    def __init__(self, model):
        self.model = model          # converters.model.LogModel (names, tgids, header)

    def scan_ring(self, ring: int, recs: np.ndarray) -> None:
        """First pass, every block of the family's rings, in file order."""

    def scan_meta(self, meta: dict) -> None:
        """First pass, every META block of the family's types."""

    def emit_ring(self, sink: TrackSink, ring: int, recs: np.ndarray) -> None:
        """Second pass: write the block's records."""

    def emit_meta(self, sink: TrackSink, meta: dict) -> None:
        """Second pass: write what a META block carries (e.g. sampled counters)."""

    def finish(self, sink: TrackSink) -> None:
        """After the last block (close open state, emit summaries)."""

    # A converter that adds arguments to thread slices other families write
    # overrides this (converters/slice_args.py calls it for every bulk or
    # single thread slice, in pass 2, with pass 1 done).
    def slice_args(self, ts: np.ndarray, dur: np.ndarray, tid: np.ndarray, name) -> list:
        """Extra arguments (Columns, `present` where a row has one) for these n
        thread slices: ts, dur, tid arrays, name a str or a "str" Column."""
        return []


def load(model) -> list[FamilyConverter]:
    out = []
    for spec in REGISTRY:
        out.append(load_spec(spec)(model))
    return out
