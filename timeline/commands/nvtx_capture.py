"""--capture-range nvtx:NAME, applied when the raw log is converted.

An NVTX range reaches the recorder only when it ends (the injection library
sends ranges in batches), so a window from the first instance's start to the
last instance's end is known only after the fact: the recording keeps
everything (with --ring, the disk stays bounded anyway) and the conversion
keeps, of every ring but the process tree, the records inside that window and
the bookkeeping a family always keeps (kernel registrations, NCCL
communicators).  This is a command-level step because it needs the cuda
family's bookkeeping rule and the gpu family's records.
"""
from __future__ import annotations

import os

from .. import events
from ..capture import CaptureWindow, copy_cut, timed_strides
from ..rawlog import KIND_END, KIND_META, KIND_RING, RawLogReader, RawLogWriter

PREFIX = "nvtx:"


def _range_name(raw: str) -> str | None:
    """The NVTX capture range's name, from the raw log's header alone: every
    conversion asks, and only such a recording is read a second time."""
    with RawLogReader(raw) as rd:
        rng = str(rd.header.get("capture_range") or "")
    return rng[len(PREFIX):] if rng.startswith(PREFIX) else None


def _scan(raw: str) -> tuple[dict, list]:
    """Per-pid strings and the NVTX records of the gpu family."""
    from ..gpu import records as gr

    strings, nvtx = {}, []
    with RawLogReader(raw) as rd:
        for blk in rd.blocks():
            if blk.kind == KIND_META:
                meta = blk.json()
                if meta.get("type") == "gpu_strings" and isinstance(meta.get("strings"), dict):
                    strings.setdefault(meta.get("pid"), {}).update(meta["strings"])
            elif blk.kind == KIND_RING and blk.ring == gr.RING_GPU:
                recs = events.decode_ring_bytes(blk.payload, gr.GPU_RECORD)
                nvtx.append(recs[recs["kind"] == gr.NVTX][["pid", "name", "start", "end"]])
    return strings, nvtx


def window_of(raw: str) -> tuple[str | None, tuple[int, int] | None]:
    """(NAME, (first start, last end)) of the recording's NVTX capture range;
    (None, None) without one; (NAME, None) when no such range was recorded."""
    name = _range_name(raw)
    if name is None:
        return None, None
    strings, nvtx = _scan(raw)
    lo = hi = None
    for part in nvtx:
        for pid, sid, start, end in part.tolist():
            if strings.get(pid, {}).get(str(sid)) == name:
                lo = start if lo is None else min(lo, start)
                hi = max(end, start) if hi is None else max(hi, end, start)
    return name, (None if lo is None else (lo, hi + 1))


def cut(raw: str, out: str, window: tuple[int, int], user=None) -> None:
    """A raw log at `out`: `raw` with event records outside `window` left out."""
    from ..cuda.family import CudaOptions
    from ..cuda.plugin import CudaPlugin

    always = CudaPlugin(None, CudaOptions()).always_keep
    cw = CaptureWindow(window[0])
    cw.intervals = [[window[0], window[1]]]
    with RawLogReader(raw) as rd:
        header = rd.header
        strides = timed_strides(header)
        w = RawLogWriter(out, {**header, "capture_cut": {"from_ns": window[0], "to_ns": window[1]}}, user=user)
        try:
            end = None
            for blk in rd.blocks():
                if blk.kind == KIND_END:
                    end = blk.json()
                else:
                    copy_cut(w, blk, cw, strides, always)
            if end is not None:
                w.finish({**end, "stop_ts": min(int(end.get("stop_ts") or window[1]), window[1])})
        finally:
            w.close()


def prepare(raw: str, where: str, user=None) -> tuple[str, str | None]:
    """The raw log to convert (a cut copy in directory `where`, or `raw`) and a note for the user."""
    name, window = window_of(raw)
    if name is None:
        return raw, None
    if window is None:
        return raw, f"no NVTX range named {name!r} was recorded: the trace holds the whole recording"
    out = os.path.join(where, f".tl-nvtx-cut-{os.getpid()}.tlraw")
    cut(raw, out, window, user=user)
    return out, (f"capture range nvtx:{name}: {(window[1] - window[0]) / 1e9:.3f} s kept, from its first "
                 "instance's start to its last's end")

