"""Trace sets for tests, made with the synthetic TrackEvent builder of
test_query_check (until the converter's --split lands): the same slices
written whole, or clipped to each chunk's time range with the boundary marks
the trace-set format defines (debug.timeline_cut, debug.timeline_span_id),
every track descriptor repeated in every chunk."""
from __future__ import annotations

import json
import os


def write_trace(path, tracks, slices, lo=None, hi=None) -> int:
    """tracks: [(key, dict of Events.track kwargs)]; slices: [(key, ts, dur,
    name, cat, args)]. Only what overlaps [lo, hi) is written, clipped to it.
    Returns the number of slices (pieces) written."""
    from test_query_check import Events

    ev = Events()
    uuid = {key: ev.track(**kw) for key, kw in tracks}
    n = 0
    for span_id, (key, ts, dur, name, cat, args) in enumerate(sorted(slices, key=lambda s: s[1]), start=1):
        end = ts + dur
        if lo is not None and (end <= lo if dur else ts < lo):
            continue
        if hi is not None and ts >= hi:
            continue
        args = dict(args)
        a, b = ts, end
        started_before = lo is not None and ts < lo
        goes_on = hi is not None and end > hi
        if started_before or goes_on:
            a, b = max(ts, lo) if lo is not None else ts, min(end, hi) if hi is not None else end
            args["timeline_cut"] = "both" if started_before and goes_on else "start" if started_before else "end"
            args["timeline_span_id"] = span_id
        ev.slice(uuid[key], a, b - a, name, cat, **args)
        n += 1
    with open(path, "wb") as f:
        f.write(ev.data())
    return n


def write_set(d, tracks, slices, bounds) -> str:
    """A trace set in directory d: one chunk per [bounds[i], bounds[i+1])."""
    os.makedirs(d, exist_ok=True)
    chunks = []
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:]), start=1):
        name = f"chunk-{i:04d}.pftrace"
        n = write_trace(os.path.join(d, name), tracks, slices, lo, hi)
        chunks.append({"file": name, "start_ns": lo, "end_ns": hi, "bytes": os.path.getsize(os.path.join(d, name)),
                       "events": n, "families": ["cuda"], "machine": None, "rank": None})
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump({"format": "timeline-trace-set", "version": 1, "chunks": chunks}, f)
    return str(d)
