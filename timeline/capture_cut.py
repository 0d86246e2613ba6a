"""A `--capture-range` cut when the raw log is converted (a CaptureRange with a
`window`, e.g. the gpu family's nvtx:NAME).

The recording kept everything (with --ring, the disk stays bounded anyway);
the raw log's header names the range.  The family that provides its kind
derives the window from its records; the conversion then keeps, of every
ring but the process tree, the records inside that window and the rows every
family always keeps (Family.always_keep: kernel registrations, communicators).
"""
from __future__ import annotations

import os

from .capture import CaptureWindow, copy_cut, timed_strides
from .family import load_spec
from .rawlog import KIND_END, RawLogReader, RawLogWriter
from .registry import ALWAYS_KEEP, capture_range_kind
from .safe_output import remove


def _range_of(raw: int, name: str) -> str | None:
    """The capture range cut at conversion, from the raw log's header alone:
    every conversion asks, and only such a recording is read a second time."""
    with RawLogReader(raw, name) as rd:
        rng = str(rd.header.get("capture_range") or "")
    found = capture_range_kind(rng)
    return rng if found is not None and found[1].window else None


def window_of(raw: int, name: str = "") -> tuple[str | None, tuple[int, int] | None, str | None]:
    """(range, (from_ns, to_ns), note) of the recording's capture range cut at
    conversion; (None, None, None) without one; (range, None, why) when its
    family found no window.  raw: a descriptor on the raw log (or a path);
    name: what messages call it."""
    rng = _range_of(raw, name)
    if rng is None:
        return None, None, None
    window, note = load_spec(capture_range_kind(rng)[1].window)(raw, name, rng)
    return rng, window, note


def _always_keep(ring: int, rows):
    keep = ALWAYS_KEEP.get(ring)
    return load_spec(keep)(ring, rows) if keep else None


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
                    copy_cut(w, blk, cw, strides, _always_keep)
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
    rng, window, note = window_of(raw, name)
    if window is None:
        return None, note
    kind = capture_range_kind(rng)[1].kind.rstrip(":")  # the copy is named after it: nvtx-cut.tlraw
    out = os.path.join(where, f"{kind}-cut.tlraw")
    return cut(raw, name, out, window, user=user), note
