"""The perfetto_trace.proto numbers the hand-written encoders use (sink.py,
writer.py): field numbers and enum values, read from the generated module
(perfetto_trace_pb2) once, at import.  The hot paths then use plain int
constants, as cheap as literals, and the numbers are the proto's own.
"""
from __future__ import annotations

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

_Packet, _Event, _Arg, _Interned = pb.TracePacket, pb.TrackEvent, pb.DebugAnnotation, pb.InternedData
_Compact = pb.FtraceEventBundle.CompactSched

TRACE_PACKET = pb.Trace.PACKET_FIELD_NUMBER  # a trace file is `repeated TracePacket packet`

# TracePacket
PKT_TIMESTAMP = _Packet.TIMESTAMP_FIELD_NUMBER
PKT_TRACK_EVENT = _Packet.TRACK_EVENT_FIELD_NUMBER
PKT_SEQUENCE_ID = _Packet.TRUSTED_PACKET_SEQUENCE_ID_FIELD_NUMBER
PKT_INTERNED_DATA = _Packet.INTERNED_DATA_FIELD_NUMBER
PKT_SEQUENCE_FLAGS = _Packet.SEQUENCE_FLAGS_FIELD_NUMBER
PKT_FTRACE_EVENTS = _Packet.FTRACE_EVENTS_FIELD_NUMBER
SEQ_CLEARED = _Packet.SEQ_INCREMENTAL_STATE_CLEARED      # sequence_flags values
SEQ_NEEDS_STATE = _Packet.SEQ_NEEDS_INCREMENTAL_STATE

# TrackEvent
EV_TYPE = _Event.TYPE_FIELD_NUMBER
EV_TRACK_UUID = _Event.TRACK_UUID_FIELD_NUMBER
EV_NAME_IID = _Event.NAME_IID_FIELD_NUMBER
EV_CATEGORY_IIDS = _Event.CATEGORY_IIDS_FIELD_NUMBER
EV_DEBUG_ANNOTATIONS = _Event.DEBUG_ANNOTATIONS_FIELD_NUMBER
EV_COUNTER_VALUE = _Event.COUNTER_VALUE_FIELD_NUMBER
EV_DOUBLE_COUNTER_VALUE = _Event.DOUBLE_COUNTER_VALUE_FIELD_NUMBER
EV_FLOW_IDS = _Event.FLOW_IDS_FIELD_NUMBER
EV_TERMINATING_FLOW_IDS = _Event.TERMINATING_FLOW_IDS_FIELD_NUMBER
SLICE_BEGIN, SLICE_END = _Event.TYPE_SLICE_BEGIN, _Event.TYPE_SLICE_END  # TrackEvent.type values
INSTANT, COUNTER = _Event.TYPE_INSTANT, _Event.TYPE_COUNTER

# DebugAnnotation (a slice's args)
ARG_NAME_IID = _Arg.NAME_IID_FIELD_NUMBER
ARG_BOOL = _Arg.BOOL_VALUE_FIELD_NUMBER
ARG_UINT = _Arg.UINT_VALUE_FIELD_NUMBER
ARG_INT = _Arg.INT_VALUE_FIELD_NUMBER
ARG_DOUBLE = _Arg.DOUBLE_VALUE_FIELD_NUMBER
ARG_STRING = _Arg.STRING_VALUE_FIELD_NUMBER
ARG_STRING_IID = _Arg.STRING_VALUE_IID_FIELD_NUMBER

# InternedData: one table per kind of string; each entry is (iid, string)
INTERNED_EVENT_NAMES = _Interned.EVENT_NAMES_FIELD_NUMBER
INTERNED_CATEGORIES = _Interned.EVENT_CATEGORIES_FIELD_NUMBER
INTERNED_ARG_NAMES = _Interned.DEBUG_ANNOTATION_NAMES_FIELD_NUMBER
INTERNED_STRING_VALUES = _Interned.DEBUG_ANNOTATION_STRING_VALUES_FIELD_NUMBER
INTERNED_IID, INTERNED_STRING = pb.EventName.IID_FIELD_NUMBER, pb.EventName.NAME_FIELD_NUMBER
# the sink encodes entries of all four tables alike
for _entry, _string in ((pb.EventCategory, "NAME"), (pb.DebugAnnotationName, "NAME"), (pb.InternedString, "STR")):
    if (_entry.IID_FIELD_NUMBER, getattr(_entry, _string + "_FIELD_NUMBER")) != (INTERNED_IID, INTERNED_STRING):
        raise ImportError(f"perfetto_trace_pb2: {_entry.__name__} is not numbered like EventName")

# FtraceEventBundle and its CompactSched (sched switches and wakings as arrays)
BUNDLE_CPU = pb.FtraceEventBundle.CPU_FIELD_NUMBER
BUNDLE_COMPACT_SCHED = pb.FtraceEventBundle.COMPACT_SCHED_FIELD_NUMBER
CS_INTERN_TABLE = _Compact.INTERN_TABLE_FIELD_NUMBER
CS_SWITCH_TIMESTAMP = _Compact.SWITCH_TIMESTAMP_FIELD_NUMBER
CS_SWITCH_PREV_STATE = _Compact.SWITCH_PREV_STATE_FIELD_NUMBER
CS_SWITCH_NEXT_PID = _Compact.SWITCH_NEXT_PID_FIELD_NUMBER
CS_SWITCH_NEXT_PRIO = _Compact.SWITCH_NEXT_PRIO_FIELD_NUMBER
CS_SWITCH_NEXT_COMM_INDEX = _Compact.SWITCH_NEXT_COMM_INDEX_FIELD_NUMBER
CS_WAKING_TIMESTAMP = _Compact.WAKING_TIMESTAMP_FIELD_NUMBER
CS_WAKING_PID = _Compact.WAKING_PID_FIELD_NUMBER
CS_WAKING_TARGET_CPU = _Compact.WAKING_TARGET_CPU_FIELD_NUMBER
CS_WAKING_PRIO = _Compact.WAKING_PRIO_FIELD_NUMBER
CS_WAKING_COMM_INDEX = _Compact.WAKING_COMM_INDEX_FIELD_NUMBER
CS_WAKING_COMMON_FLAGS = _Compact.WAKING_COMMON_FLAGS_FIELD_NUMBER
