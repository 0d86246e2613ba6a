"""Arguments one family adds to the thread slices another family writes.

The pystack family knows the Python stack at the start of a CUDA call; the
cuda family writes that call's slice.  Neither imports the other: a family
converter that overrides `FamilyConverter.slice_args` is asked, for every
thread slice any family writes (bulk `slices` or single `slice`), for extra
argument Columns, which go into the slice with its own.  Pass 1 is over by
then, so the asker knows all its records.  Without such a converter the
families write to the format's sink directly (no cost).
"""
from __future__ import annotations

import numpy as np

from .families import FamilyConverter


def joining(sink, families):
    """`sink`, or a wrapper adding the arguments of the families that have any."""
    joiners = [f for f in families if type(f).slice_args is not FamilyConverter.slice_args]
    return JoiningSink(sink, joiners) if joiners else sink


class JoiningSink:
    """A TrackSink whose thread slices get the joiners' arguments; every other
    call goes to the wrapped sink unchanged."""

    def __init__(self, sink, joiners):
        self._sink, self._joiners = sink, joiners

    def __getattr__(self, name):
        return getattr(self._sink, name)

    def _extra(self, ts, dur, tid, name) -> list:
        out = []
        for j in self._joiners:
            out += j.slice_args(ts, dur, tid, name) or []
        return out

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None):
        if len(ts):
            extra = self._extra(np.asarray(ts), np.asarray(dur), np.asarray(tid), name)
            if extra:
                args = [*args, *extra]
        return self._sink.slices(ts, dur, tid, pid, name, cat, args, flow_out, flow_in)

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None):
        extra = self._extra(np.array([ts], np.int64), np.array([dur], np.int64), np.array([tid], np.int64), name)
        if extra:
            args = dict(args or {})
            for c in extra:
                v = c.pylist()[0]
                if v is not None:
                    args[c.key] = v
        return self._sink.slice(ts, dur, tid, pid, name, cat, args, flow_out=flow_out, flow_in=flow_in)
