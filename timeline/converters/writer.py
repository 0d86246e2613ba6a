"""The interface every trace format's writer offers the conversion loop
(timeline.converters.convert): PerfettoWriter and ChromeJsonWriter."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .track_events import TrackSink


@runtime_checkable
class TraceWriter(Protocol):
    sink: TrackSink     # where families write their tracks
    n_switch: int       # sched switches written (0 where a format does not count them)
    switch_bytes: int   # bytes of compact sched switch arrays (Perfetto; 0 elsewhere)

    def begin(self) -> None: ...
    def sched(self, chunks: list) -> None: ...
    def proc(self, recs: np.ndarray) -> None: ...
    def snapshot(self, meta: dict) -> None: ...
    def finish(self) -> None: ...
