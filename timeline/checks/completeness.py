"""Whether a trace loaded by trace_processor is whole.

Three things say a trace is not:

* the file itself: a Perfetto protobuf trace is a sequence of top-level
  packets (field 1, length-delimited); a packet whose length runs past the
  end of the file means the file was cut at that byte (a full disk, an
  interrupted copy or download). trace_processor loads what comes before and
  says nothing, so a trace cut in its first bytes looked like one where
  nothing was recorded. A Chrome JSON trace written by timeline ends with its
  "metadata" object; one without it was cut.
* timeline's Perfetto writer puts a `timeline_version` entry at the start and
  a `timeline_trace_complete` entry (with counts) as the very last packet
  (both in the metadata table: cr-<key> for the first bundle of such entries,
  cr-<n>-<key> for later ones). A trace with the first and not the last was
  cut short: a full disk, a copy interrupted, a conversion killed.
* the recording: the last packet says whether the raw log it was converted
  from had its end block (`timeline_recording_finalized`; the JSON's
  metadata.timeline.finalized). A raw log without one was cut (recorder killed,
  disk full): the trace is whole, the recording is not.

Traces from other tools, and older ones without these markers, can only be
judged by the first test (the packets are walked by trace_file.file_fields).
"""
from __future__ import annotations

import json
import os
from typing import Optional

from .. import trace_file

SQL = """
select
  exists(select 1 from metadata where name glob 'cr-*timeline_version') as ours,
  (select max(int_value) from metadata where name glob 'cr-*timeline_trace_complete') as complete,
  (select min(int_value) from metadata where name glob 'cr-*timeline_recording_finalized') as finalized,
  (select max(int_value) from metadata where name glob 'cr-*timeline_switches') as switches,
  (select count(*) from sched)
    + coalesce((select sum(value) from stats where name = 'compact_sched_switch_skipped'), 0) as loaded
"""

CUT_LAST_PACKET = ("the trace is not complete: its last packet is missing (cut short: disk full, an interrupted "
                   "copy or conversion?); everything after the cut, drops included, is unknown")
CUT_RECORDING = ("the recording was cut short: the raw log this trace was converted from has no end (the recorder "
                 "was killed, or its disk filled up); what happened after the last data it wrote, drops included, "
                 "is unknown")

_JSON_HEAD = b'{"systemTraceEvents":'  # how timeline's Chrome JSON writer starts
_JSON_TAIL = 1 << 20  # its metadata object is a few KiB at the very end


def completeness_problem(tp, path: Optional[str] = None, *, fd: Optional[int] = None) -> Optional[str]:
    """One sentence when the trace is not whole (or loads less than it says it
    holds, or was converted from a cut recording), else None. With `fd` (a
    descriptor on the trace file) or `path`, the file itself is read too (see
    file_problem)."""
    problem = fd_problem(fd) if fd is not None else file_problem(path) if path else None
    if problem:
        return problem
    row = tp.query(SQL).as_dicts()[0]
    if not row["ours"]:
        return None
    if not row["complete"]:
        return CUT_LAST_PACKET
    if row["finalized"] == 0:
        return CUT_RECORDING
    if row["switches"] is not None and row["loaded"] < row["switches"]:
        return (f"the trace says it holds {row['switches']:,} context switches but {row['loaded']:,} loaded: "
                "part of it is damaged")
    return None


def file_problem(path: str) -> Optional[str]:
    """What the file's own structure says is missing, or None (whole, or a
    format this cannot judge). Opened as the invoking user, like any input."""
    from ..identity import invoking_user

    try:
        fd = invoking_user().open_input(path)
    except OSError:
        return None  # trace_processor read it some other way; nothing to add
    try:
        return fd_problem(fd)
    finally:
        os.close(fd)


def fd_problem(fd: int) -> Optional[str]:
    """file_problem for the trace file open on `fd`."""
    head = os.pread(fd, len(_JSON_HEAD), 0)
    if head[:1] == b"\x0a":  # field 1, length-delimited: a Perfetto protobuf trace
        return packet_framing_problem(fd)
    if head == _JSON_HEAD:
        return _json_tail_problem(fd)
    return None


def packet_framing_problem(fd: int) -> Optional[str]:
    """Walk the top-level protobuf framing of the file on `fd` to its end
    without decoding any packet; a sentence when it does not end on a packet
    boundary."""
    size = os.fstat(fd).st_size
    try:
        for _ in trace_file.file_fields(fd):
            pass
    except trace_file.ProtoCut as e:
        return _cut(size, e.offset, e.length)
    except trace_file.ProtoError as e:
        return _damaged(size, e.offset)
    return None


def _damaged(size: int, pos: int) -> str:
    return (f"the trace is damaged: byte {pos:,} of {size:,} does not start a packet (the file was overwritten or "
            "is not all a Perfetto trace); what follows is not loaded")


def _cut(size: int, pos: int, length: Optional[int]) -> str:
    what = "a packet's header" if length is None else f"a packet of {length:,} bytes"
    return (f"the trace is not complete: the file is cut at byte {size:,}, inside {what} that starts at byte "
            f"{pos:,} (a full disk, an interrupted copy or download?); everything after the cut, drops included, "
            "is unknown")


def _json_tail_problem(fd: int) -> Optional[str]:
    """timeline's Chrome JSON ends with `"metadata":{"timeline":{...}}}`: its
    absence means a cut file, its `finalized` false a cut recording."""
    size = os.fstat(fd).st_size
    off = max(0, size - _JSON_TAIL)
    tail = os.pread(fd, size - off, off)
    i = tail.rfind(b'\n"metadata":')
    try:
        meta = json.loads(tail[i + len(b'\n"metadata":'):].rstrip()[:-1]) if i >= 0 else None
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or not isinstance(meta.get("timeline"), dict):
        return (f"the trace is not complete: the file ({size:,} bytes) lacks the metadata that ends every "
                "timeline JSON trace (cut short: disk full, an interrupted copy or conversion?); everything after "
                "the cut, drops included, is unknown")
    if meta["timeline"].get("finalized") is False:
        return CUT_RECORDING
    return None
