"""Raw log -> Perfetto protobuf (.pftrace) or Chrome JSON (.json / .json.gz).

    from timeline.converters import convert
    res = convert("run.tlraw", "run.pftrace", fmt="perfetto")

Both formats share model.scan (first pass: processes, threads, final names)
and model.stream (second pass: normalised sched chunks, proc records).  The
output is written to a 0600 temporary file next to out_path and renamed over
it at the end (timeline.safe_output), so a failed conversion never leaves a
half-written trace.
"""
from __future__ import annotations

import dataclasses
import gzip
import os
import sys

from ..rawlog import Damage, RawLogError
from ..trace_file import format_for, is_gzip_name
from . import families as _families
from . import model as _model
from . import slice_args as _slice_args
from .model import ItemKind
from .interface import TraceWriter

__all__ = ["convert", "ConvertResult", "FORMATS", "format_for", "RawLogError"]

FORMATS = ("perfetto", "chrome")


@dataclasses.dataclass
class ConvertResult:
    events: int                 # raw records converted (sched + proc)
    damage: Damage | None       # where reading stopped early, None if the log is whole
    finalized: bool             # the log has its END block
    out_bytes: int              # size of the written file
    drops: dict                 # ring name -> records the recorder dropped
    out_path: str = ""
    synthetic_switches: int = 0  # switches added to keep each CPU's chain whole
    switches: int = 0            # context switches written
    switch_bytes: int = 0        # perfetto: bytes of the compact_sched switch arrays
    chunks: list | None = None   # a trace set (out_path a NAME.tlset directory): its index's chunks


def convert(raw_path: str, out_path: str, fmt: str | None = None, progress=None, user=None,
            split=None, source: str | None = None) -> ConvertResult:
    """Convert a raw log.  progress: optional callable(done_bytes, total_bytes).
    user: in sudo mode, the invoking user, who creates and owns the output
    and as whom the files the raw log names are read.

    fmt: "perfetto" | "chrome"; None picks it from out_path (format_for).
    "chrome" is gzip-compressed when out_path ends with .gz.

    split: a trace_set.SplitSpec (perfetto only): write a trace set, the
    directory trace_set.set_path(out_path), split by time or events
    (trace_set.AUTO: only when the log holds more than AUTO_SPLIT_ABOVE
    records); result.out_path names what was written.  source: the raw
    log's name for the set's index (default: raw_path's base name).

    Raises RawLogError when raw_path is not a raw log, ValueError for a bad
    fmt or when out_path is the raw log itself.  A damaged/truncated log is
    converted up to the damage, reported in the result.
    """
    if fmt is None:
        fmt = format_for(out_path)
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})")
    raw_path, out_path = os.fspath(raw_path), os.fspath(out_path)
    if _model.same_file(raw_path, out_path):
        raise ValueError("output path is the raw log itself")
    size = os.stat(raw_path).st_size if os.path.exists(raw_path) else 0
    total = 2 * size  # two passes over the file

    def load_families(model):
        model.user = user  # files the raw log names (mapped libraries) are read as the user
        return _families.load(model)

    m = _model.scan(raw_path, progress, total, families_loader=load_families)
    norm = _model.SchedNormalizer(m, leading=(fmt == "perfetto"))
    starts = None
    if split is not None and fmt == "perfetto":
        from . import trace_set
        starts = trace_set.plan(m, split)
    elif split is not None and not split.auto:
        raise ValueError("--split writes Perfetto traces: use --format perfetto")
    if starts is not None:
        out_dir = trace_set.set_path(out_path)
        events, chunks, nbytes = trace_set.write(m, norm, out_dir, starts, progress, size, total, user,
                                                 source=source or os.path.basename(raw_path))
        if progress:
            progress(total, total)
        return ConvertResult(events=events, damage=m.damage, finalized=m.finalized, out_bytes=nbytes,
                             drops=m.drops, out_path=out_dir, synthetic_switches=norm.synthetic,
                             switches=sum(c["switches"] for c in chunks), chunks=chunks)
    atomic = _AtomicOutput(out_path, user)
    with atomic as raw_f:
        f = raw_f
        if fmt == "chrome" and is_gzip_name(out_path):
            f = gzip.GzipFile(fileobj=raw_f, mode="wb", compresslevel=5, mtime=0)
        w: TraceWriter
        if fmt == "perfetto":
            from .perfetto.writer import PerfettoWriter
            w = PerfettoWriter(f, m)
        else:
            from .chrome.writer import ChromeJsonWriter
            w = ChromeJsonWriter(f, m)
        events = second_pass(m, norm, w, progress, size, total)
        if f is not raw_f:
            f.close()
    if progress:
        progress(total, total)
    return ConvertResult(events=events, damage=m.damage, finalized=m.finalized,
                         out_bytes=atomic.size, drops=m.drops,
                         out_path=out_path, synthetic_switches=norm.synthetic,
                         switches=w.n_switch, switch_bytes=w.switch_bytes)


def second_pass(m, norm, w: TraceWriter, progress, size: int, total: int, on_family=None) -> int:
    """Stream the raw log's items into writer w, families through its sink;
    returns the raw records converted.  on_family(fam): called before a
    family writes (a trace set notes which chunks each family filled)."""
    events = 0
    w.begin()
    sink = _slice_args.joining(w.sink, m.families)  # families that add args to others' slices
    note = on_family or (lambda fam: None)
    for item in _model.stream(m, norm, progress, size, total):
        events += item.nrec
        if item.kind is ItemKind.SCHED:
            w.sched(item.chunks)
        elif item.kind is ItemKind.PROC:
            w.proc(item.recs)
        elif item.kind is ItemKind.PROCS:
            w.snapshot(item.meta)
        elif item.kind is ItemKind.RING:
            for fam in m.families:
                if item.ring in fam.rings:
                    note(fam)
                    fam.emit_ring(sink, item.ring, item.recs)
        elif item.kind is ItemKind.META:
            for fam in m.families:
                if item.meta.get("type") in fam.metas:
                    note(fam)
                    fam.emit_meta(sink, item.meta)
    for fam in m.families:
        note(fam)
        fam.finish(sink)
    note(None)
    w.finish()
    return events


class _AtomicOutput:
    """A buffered file object over a safe_output.OutputFile: renamed to
    path on success, removed on failure."""

    def __init__(self, path: str, user=None):
        self.path, self.user = path, user

    def __enter__(self):
        from ..safe_output import OutputFile

        self.out = OutputFile(self.path, self.user)
        self.f = os.fdopen(os.dup(self.out.fd), "wb", buffering=1 << 20)
        return self.f

    def __exit__(self, exc_type, exc, tb):
        # The last buffered bytes are written by close(): only a file that
        # closed cleanly is renamed to the output name (a full disk there
        # must not leave a cut trace behind).
        try:
            if not self.f.closed:
                self.f.close()
            self.size = os.fstat(self.out.fd).st_size  # the written size, whatever the name holds later
        except BaseException:
            self.out.__exit__(*sys.exc_info())
            raise
        self.out.__exit__(exc_type, exc, tb)
        return False
