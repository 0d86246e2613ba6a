"""Conversion of Python stack samples to Perfetto, and their size in the trace.

    python bench/pystack_convert_speed.py [--samples 1000000] [--stacks 50]
    python bench/pystack_convert_speed.py --trace RECORDED.pftrace   # its samples' bytes only

A synthetic raw log laid out as the recorder writes it (tests/rawlog_factory.py):
`--samples` CPU samples of one thread at 99 Hz over `--stacks` distinct stacks
(8 frames each), converted to .pftrace.  Reported: samples converted per
second (the whole conversion's wall time after a first small conversion
has imported the converters: all of it samples but the process tree), and bytes per sample in the trace, framing
included, counted by walking the packets, field by field: timer samples are
StreamingProfilePacket runs on one sequence per thread (their interned
names and stacks, written once, not counted); stacks at calls and waits, and
recordings without a MONOTONIC reading, PerfSample packets.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from rawlog_factory import T, LogBuilder, end_block  # noqa: E402

from timeline import events as ev  # noqa: E402
from timeline import trace_file  # noqa: E402
from timeline.converters import convert  # noqa: E402
from timeline.pystack import probes  # noqa: E402
from timeline.pystack import records as R  # noqa: E402

PID = 1000
PKT_PERF_SAMPLE = 66
PKT_INTERNED_DATA, PKT_THREAD_DESCRIPTOR, PKT_STREAMING_PROFILE = 12, 44, 54


def write_log(path: str, n: int, nstacks: int) -> None:
    b = LogBuilder()
    b.fork(T(1), 0, 999, 999, PID, PID, "python3", "timeline", launched=True)
    b.exec(T(2), 0, PID, "python3", ["python3", "train.py"])
    b.header["pystack"] = {"probes": probes.table(), "max_frames": 64, "sample_hz": 99}
    b.flush()
    frames = [[i, f"fn{i}", f"/w/mod{i % 7}.py", 10 + i] for i in range(nstacks + 8)]
    stacks = [[PID, f"{s + 1:x}", 0, list(range(s, s + 8))] for s in range(nstacks)]
    b.blocks.append(("meta", {"type": "py_stacks", "ts": T(3), "frames": frames, "stacks": stacks}))
    b.header["rings"][str(R.RING_PYSTACK)] = {"name": "pystack", "record_size": R.PY_EVENT.itemsize,
                                              "stride": ev.ring_stride(R.PY_EVENT)}
    rng = np.random.default_rng(1)
    per_block = 100_000
    for start in range(0, n, per_block):
        k = min(per_block, n - start)
        a = np.zeros(k, R.PY_EVENT)
        a["ts"] = T(10) + (np.arange(start, start + k) * 10_101_010)  # 99 Hz
        a["stack_id"] = rng.integers(1, nstacks + 1, k)
        a["tid"], a["tgid"], a["kind"] = PID, PID, R.PY_SAMPLE
        b.blocks.append(("ring", (R.RING_PYSTACK, ev.encode_ring_bytes(a))))
    b.write(path, end_block(stop_ts=T(10) + n * 10_101_010 + 1))


FIELD_NAMES = {8: "time", 10: "sequence id", PKT_PERF_SAMPLE: "PerfSample tag+length",
               2: "pid", 3: "tid", 4: "callstack id"}


def stream_bytes(data, spans) -> tuple[int, int, dict[str, int]]:
    """Samples in StreamingProfilePackets, the bytes of their packets (framing, thread descriptors,
    sequence ids and flags included; interned data not), and those bytes by field."""
    n = total = 0
    by_field: Counter = Counter()
    for a, b in spans:
        fields = list(trace_file.iter_fields(data[a:b]))
        if not any(f[0] in (PKT_STREAMING_PROFILE, PKT_THREAD_DESCRIPTOR) for f in fields):
            continue
        size = b - a + 1 + len(ev_varint(b - a))
        for num, _, _, start, stop in fields:
            if num == PKT_INTERNED_DATA:
                size -= stop - start + 1 + len(ev_varint(stop - start))
            elif num == PKT_STREAMING_PROFILE:
                inner = 0
                for f in trace_file.iter_fields(data[a + start:a + stop]):
                    by_field["callstack id" if f[0] == 1 else "time (us)"] += f[4] - inner
                    n += f[0] == 1
                    inner = f[4]
        total += size
    by_field["packets (framing, sequence, thread descriptors)"] += total - sum(by_field.values())
    return n, total, by_field


def sample_bytes(path: str) -> tuple[int, int, dict[str, int]]:
    """Samples, their bytes (with their packets' tags and lengths in the Trace), and those bytes by field."""
    data = memoryview(open(path, "rb").read())
    spans = list(trace_file.packet_spans(data))
    got = stream_bytes(data, spans)
    if got[0]:
        return got
    n = total = 0
    by_field: Counter = Counter()
    for a, b in spans:
        fields = list(trace_file.iter_fields(data[a:b]))
        if not any(f[0] == PKT_PERF_SAMPLE for f in fields):
            continue
        n += 1
        total += b - a + 1 + len(ev_varint(b - a))
        by_field["framing"] += 1 + len(ev_varint(b - a))
        pos = 0
        for num, _, _, start, stop in fields:
            if num == PKT_PERF_SAMPLE:
                by_field[FIELD_NAMES[num]] += start - pos
                inner = 0
                for f in trace_file.iter_fields(data[a + start:a + stop]):
                    by_field[FIELD_NAMES.get(f[0], f"PerfSample.{f[0]}")] += f[4] - inner
                    inner = f[4]
            else:
                by_field[FIELD_NAMES.get(num, f"TracePacket.{num}")] += stop - pos
            pos = stop
    return n, total, by_field


def report(n: int, total: int, by_field: dict[str, int]) -> str:
    parts = ", ".join(f"{k} {v / max(n, 1):.2f}" for k, v in by_field.items())
    return f"{n:,} samples, {total / max(n, 1):.2f} bytes each ({parts})"


def ev_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        out.append((v & 127) | (128 if v > 127 else 0))
        v >>= 7
        if not v:
            return bytes(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--stacks", type=int, default=50)
    ap.add_argument("--trace", help="a recorded .pftrace: report its samples' bytes, convert nothing")
    args = ap.parse_args()
    if args.trace:
        print(report(*sample_bytes(args.trace)))
        return
    with tempfile.TemporaryDirectory() as d:
        raw, out = os.path.join(d, "s.tlraw"), os.path.join(d, "s.pftrace")
        write_log(raw, 1000, args.stacks)
        convert(raw, out)  # the converters' imports, once: not per sample
        write_log(raw, args.samples, args.stacks)
        t = time.perf_counter()
        convert(raw, out)
        dt = time.perf_counter() - t
        counted = sample_bytes(out)
    print(f"{args.samples:,} samples, {args.stacks} stacks: converted in {dt:.2f} s = "
          f"{args.samples / dt / 1e6:.2f} M samples/s; {report(*counted)}")


if __name__ == "__main__":
    main()
