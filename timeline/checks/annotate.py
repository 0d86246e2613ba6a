"""Write a copy of a trace with the findings on a "timeline findings" track.

Perfetto protobuf: a trace file is a sequence of length-delimited `packet`
fields (field 1 of `Trace`), so a serialized `Trace` holding only our packets
can be appended to the original bytes unchanged. Chrome JSON: our events are
added to traceEvents (the original is loaded, so this costs memory).
"""
from __future__ import annotations

import gzip
import json
import os
from typing import Optional

from .. import trace_file
from .runner import SEVERITIES, Report

TRACK_NAME = "timeline findings"
_SEQ_ID = 0x71F1  # our own packet sequence: never shared with the recorder's
_UUID_BASE = 0x71F1_0000_0000
_JSON_PID = 0x7FFFFFF0  # above any Linux pid (pid_max <= 2^22)


def _items(report: Report):
    """(check, finding, ts, dur) for every real finding (no ok / n/a rows);
    findings without a time window become instants at the trace start."""
    for r in report.results:
        for f in r.findings:
            if f.severity not in SEVERITIES:
                continue
            ts = f.ts if f.ts is not None else (report.start_ts or 0)
            yield r.check, f, ts, max(0, f.dur or 0) if f.ts is not None else 0


def _lanes(items):
    """Per check, spread findings over lanes so slices in a lane never
    partially overlap (TrackEvent slices on one track must nest)."""
    lanes: dict[str, list[int]] = {}  # check id -> end ts of each lane
    out = []
    for check, f, ts, dur in sorted(items, key=lambda i: (i[0].id, i[2], -i[3])):
        ends = lanes.setdefault(check.id, [])
        lane = next((i for i, end in enumerate(ends) if end <= ts), None)
        if lane is None:
            lane = len(ends)
            ends.append(0)
        ends[lane] = ts + dur
        out.append((check, f, ts, dur, lane))
    return out


def _args(check, f) -> dict:
    a = {"check": check.id, "severity": f.severity, "finding": f.message,
         "hint": f.hint or (check.fix if f.severity in ("error", "warning") else None)}
    a.update({f"evidence.{k}": v for k, v in f.evidence.items()})
    return {k: v for k, v in a.items() if v is not None}


def _slice_name(check, f) -> str:
    return f"{f.severity.upper()}: {check.title}"


def _proto_packets(report: Report) -> bytes:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()

    def packet(ts: Optional[int] = None):
        p = trace.packet.add()
        p.trusted_packet_sequence_id = _SEQ_ID
        p.sequence_flags = (pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED if len(trace.packet) == 1
                            else pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)
        if ts is not None:
            p.timestamp = ts
        return p

    root = _UUID_BASE
    d = packet().track_descriptor
    d.uuid, d.name = root, TRACK_NAME
    tracks: dict[tuple[str, int], int] = {}
    for check, f, ts, dur, lane in _lanes(_items(report)):
        key = (check.id, lane)
        if key not in tracks:
            tracks[key] = root + 1 + len(tracks)
            d = packet().track_descriptor
            d.uuid, d.parent_uuid = tracks[key], root
            d.name = check.title + (f" ({lane + 1})" if lane else "")
        ev = packet(ts).track_event
        ev.track_uuid, ev.name = tracks[key], _slice_name(check, f)
        ev.categories.append("timeline.findings")
        ev.type = pb.TrackEvent.TYPE_SLICE_BEGIN if dur > 0 else pb.TrackEvent.TYPE_INSTANT
        for k, v in _args(check, f).items():
            a = ev.debug_annotations.add()
            a.name = k
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                a.string_value = str(v)
            elif isinstance(v, int):
                a.int_value = v
            else:
                a.double_value = v
        if dur > 0:
            end = packet(ts + dur).track_event
            end.track_uuid, end.type = tracks[key], pb.TrackEvent.TYPE_SLICE_END
    return trace.SerializeToString()


def _json_events(report: Report) -> list[dict]:
    events = [{"ph": "M", "name": "process_name", "pid": _JSON_PID, "tid": 0, "args": {"name": TRACK_NAME}}]
    tids: dict[tuple[str, int], int] = {}
    for check, f, ts, dur, lane in _lanes(_items(report)):
        key = (check.id, lane)
        if key not in tids:
            tids[key] = len(tids) + 1
            events.append({"ph": "M", "name": "thread_name", "pid": _JSON_PID, "tid": tids[key],
                           "args": {"name": check.title + (f" ({lane + 1})" if lane else "")}})
        ev = {"name": _slice_name(check, f), "cat": "timeline.findings", "pid": _JSON_PID, "tid": tids[key],
              "ts": ts / 1e3, "args": _args(check, f)}  # JSON times are microseconds
        ev.update({"ph": "X", "dur": dur / 1e3} if dur > 0 else {"ph": "i", "s": "t"})
        events.append(ev)
    return events


def write_annotated(src: str, out: str, report: Report, user=None) -> int:
    """Writes `src` plus the report's findings to `out` (same format as src).
    `src` is read, and `out` created through safe_output, as `user` (the
    invoking user in sudo mode): root copies nothing the user could not read.
    Returns the number of findings written."""
    from ..safe_output import OutputFile

    n = sum(1 for _ in _items(report))
    fd = trace_file.open_trace_file(src, user)
    try:
        head = trace_file.read_head(fd)
        gz = trace_file.sniff(head) == trace_file.GZIP
        is_json = trace_file.sniff(trace_file.gzip_head(head) if gz else head) == trace_file.JSON
        if gz and not is_json:
            raise ValueError(f"{src} is gzip-compressed but not JSON: decompress it first to annotate it")
        doc = None
        if is_json:  # loaded whole, before the output exists
            doc = json.loads(trace_file.read_whole(fd, src))
            if isinstance(doc, list):  # the bare-array form of the JSON trace format
                doc = {"traceEvents": doc}
            doc.setdefault("traceEvents", []).extend(_json_events(report))
        with OutputFile(out, user) as dest, os.fdopen(os.dup(dest.fd), "wb") as fh:
            if doc is not None:
                data = json.dumps(doc, separators=(",", ":")).encode()
                fh.write(gzip.compress(data, 6) if trace_file.is_gzip_name(out) else data)
            else:
                off = 0
                while chunk := os.pread(fd, 1 << 24, off):
                    fh.write(chunk)
                    off += len(chunk)
                fh.write(_proto_packets(report))
    finally:
        os.close(fd)
    return n
