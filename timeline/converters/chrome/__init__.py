"""The Chrome JSON format (.json, .json.gz): one implementation of
converters.interface.

writer.py     ChromeJsonWriter (TraceWriter): sched as ftrace text lines
              (systemTraceEvents), names as "M" events, metadata
sink.py       ChromeTrackSink (TrackSink): families' events as JSON trace
              events, per event and in bulk (whole columns, with ..columns.Rows)
bulk_text.py  the numpy helpers behind the sched text lines
"""
