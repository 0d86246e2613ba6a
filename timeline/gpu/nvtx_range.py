"""--capture-range nvtx:NAME: the window, from the first instance of the NVTX
range NAME's start to the last one's end.

An NVTX range reaches the recorder only when it ends (the injection library
sends ranges in batches), so the window is known only after the fact: the
recording keeps everything and the conversion cuts (timeline/capture_cut.py
asks `window`, named by the descriptor's CaptureRange).
"""
from __future__ import annotations

from .. import events
from ..rawlog import KIND_META, KIND_RING, RawLogReader
from . import records as gr


def _scan(raw, name: str) -> tuple[dict, list]:
    """Per-pid strings and the NVTX records of the gpu family."""
    strings, nvtx = {}, []
    with RawLogReader(raw, name) as rd:
        for blk in rd.blocks():
            if blk.kind == KIND_META:
                meta = blk.json()
                if meta.get("type") == "gpu_strings" and isinstance(meta.get("strings"), dict):
                    strings.setdefault(meta.get("pid"), {}).update(meta["strings"])
            elif blk.kind == KIND_RING and blk.ring == gr.RING_GPU:
                recs = events.decode_ring_bytes(blk.payload, gr.GPU_RECORD)
                nvtx.append(recs[recs["kind"] == gr.NVTX][["pid", "name", "start", "end"]])
    return strings, nvtx


def window(raw, name: str, value: str) -> tuple[tuple[int, int] | None, str]:
    """((first start, last end + 1), a note) of the range `value` names
    ("nvtx:NAME"); (None, why not) when no such range was recorded.
    raw: a descriptor on the raw log (or a path); name: what messages call it."""
    rng = value.split(":", 1)[1]
    strings, nvtx = _scan(raw, name)
    lo = hi = None
    for part in nvtx:
        for pid, sid, start, end in part.tolist():
            if strings.get(pid, {}).get(str(sid)) == rng:
                lo = start if lo is None else min(lo, start)
                hi = max(end, start) if hi is None else max(hi, end, start)
    if lo is None:
        return None, f"no NVTX range named {rng!r} was recorded: the trace holds the whole recording"
    return (lo, hi + 1), (f"capture range nvtx:{rng}: {(hi + 1 - lo) / 1e9:.3f} s kept, from its first "
                          "instance's start to its last's end")
