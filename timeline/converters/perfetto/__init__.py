"""The Perfetto protobuf format (.pftrace): one implementation of
converters.interface.

writer.py   PerfettoWriter (TraceWriter): clock, system info, compact sched
            bundles, ftrace process events, process trees, drop statistics
sink.py     PerfettoTrackSink (TrackSink): families' TrackEvents, interned,
            per event and in bulk (whole columns, with ..columns.Rows)
wire.py     protobuf wire encoding by hand, for the hot paths
fields.py   the proto's field numbers those hand encoders use, from perfetto_trace_pb2
"""
