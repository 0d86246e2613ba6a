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
from ..safe_output import remove

PREFIX = "nvtx:"


def _range_name(raw: int, name: str) -> str | None:
    """The NVTX capture range's name, from the raw log's header alone: every
    conversion asks, and only such a recording is read a second time."""
    with RawLogReader(raw, name) as rd:
        rng = str(rd.header.get("capture_range") or "")
    return rng[len(PREFIX):] if rng.startswith(PREFIX) else None


def _scan(raw: int, name: str) -> tuple[dict, list]:
    """Per-pid strings and the NVTX records of the gpu family."""
    from ..gpu import records as gr

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


def window_of(raw: int, name: str = "") -> tuple[str | None, tuple[int, int] | None]:
    """(NAME, (first start, last end)) of the recording's NVTX capture range;
    (None, None) without one; (NAME, None) when no such range was recorded.
    raw: a descriptor on the raw log (or a path); name: what messages call it."""
    rng = _range_name(raw, name)
    if rng is None:
        return None, None
    strings, nvtx = _scan(raw, name)
    lo = hi = None
    for part in nvtx:
        for pid, sid, start, end in part.tolist():
            if strings.get(pid, {}).get(str(sid)) == rng:
                lo = start if lo is None else min(lo, start)
                hi = max(end, start) if hi is None else max(hi, end, start)
    return rng, (None if lo is None else (lo, hi + 1))


class CutCopy:
    """The cut raw log: converted through `fd` (held since it was written;
    its name is in a directory the user owns, who may swap it), then discarded."""

    def __init__(self, path: str, fd: int, user):
        self.path, self.fd, self.user = path, fd, user

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        remove(self.path, self.user)


def cut(raw: int, name: str, out: str, window: tuple[int, int], user=None) -> CutCopy:
    """`raw` with event records outside `window` left out, as a raw log under
    a temporary name next to `out` (hidden, unpredictable: nothing can be
    planted there in advance)."""
    from ..cuda.family import CudaOptions
    from ..cuda.plugin import CudaPlugin

    always = CudaPlugin(None, CudaOptions()).always_keep
    cw = CaptureWindow(window[0])
    cw.intervals = [[window[0], window[1]]]
    with RawLogReader(raw, name) as rd:
        header = rd.header
        strides = timed_strides(header)
        w = RawLogWriter(out, {**header, "capture_cut": {"from_ns": window[0], "to_ns": window[1]}}, user=user,
                         publish=False)
        try:
            end = None
            for blk in rd.blocks():
                if blk.kind == KIND_END:
                    end = blk.json()
                else:
                    copy_cut(w, blk, cw, strides, always)
            if end is not None:
                w.finish({**end, "stop_ts": min(int(end.get("stop_ts") or window[1]), window[1])})
            copy = CutCopy(w.path, w.read_fd(), user)
        except BaseException:
            w.close()
            remove(w.path, user)
            raise
        w.close()
    return copy


def prepare(raw: int, name: str, where: str, user=None) -> tuple[CutCopy | None, str | None]:
    """The cut copy to convert instead of the raw log (None: the raw log itself)
    and a note for the user.  raw: a descriptor on the raw log; name: what
    messages call it; the copy is written in directory `where`."""
    rng, window = window_of(raw, name)
    if rng is None:
        return None, None
    if window is None:
        return None, f"no NVTX range named {rng!r} was recorded: the trace holds the whole recording"
    out = os.path.join(where, "nvtx-cut.tlraw")
    copy = cut(raw, name, out, window, user=user)
    return copy, (f"capture range nvtx:{rng}: {(window[1] - window[0]) / 1e9:.3f} s kept, from its first "
                  "instance's start to its last's end")
