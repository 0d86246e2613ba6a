"""Sustained drain rate: how many events/s timeline records without loss (issue 6, workload 3).

    sudo python bench/drain_rate.py [--seconds 3] [--pairs 1,2,4] [--ab-runs 3]

A C context-switch storm (pairs of threads ping-ponging a byte over pipes,
compiled here with cc; Python's own overhead would cap the storm long before
the recorder) is recorded with the default settings for each number of
pairs; reported: events/s recorded, and from the raw log's END block the
records lost to a full ring, those the kernel refused with room left, and
the reserves that were refused once and then succeeded on retry (nothing
lost).  Then the same storm with a 1 MiB ring drained every 2 s shows what
happens past the limit: drops are counted and reported, and the recorder
still finishes on time.

The consumer-position A/B records the 2-pair storm in this process,
alternating the recorder's store of the ring's consumer position with the
old one (struct.pack_into: zeroes the 8 bytes, then writes them one at a
time) and counting the reserves the kernel refused with room left (retried
+ refused), as is and with 2000 extra stores of the same position per drain.

The consumer side is measured on its own too: the time to copy a full
16 MiB ring out of its mmap, as events/s.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

# This checkout's timeline, also for the recorder started with `python -m timeline.cli`.
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, REPO)

STORM_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double secs;
static long counts[64];

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

struct pair { int a[2], b[2]; int idx; };

static void *pong(void *arg) {
    struct pair *p = arg; char c;
    while (read(p->a[0], &c, 1) == 1 && c != 'q') write(p->b[1], &c, 1);
    return NULL;
}

static void *ping(void *arg) {
    struct pair *p = arg; char c = 'x'; long n = 0; double end = now() + secs;
    while (now() < end) { write(p->a[1], &c, 1); read(p->b[0], &c, 1); n++; }
    c = 'q'; write(p->a[1], &c, 1); counts[p->idx] = n;
    return NULL;
}

int main(int argc, char **argv) {
    int pairs = atoi(argv[1]); secs = atof(argv[2]);
    pthread_t t[128]; struct pair p[64];
    for (int i = 0; i < pairs; i++) {
        pipe(p[i].a); pipe(p[i].b); p[i].idx = i;
        pthread_create(&t[2 * i], NULL, pong, &p[i]);
        pthread_create(&t[2 * i + 1], NULL, ping, &p[i]);
    }
    long total = 0;
    for (int i = 0; i < 2 * pairs; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < pairs; i++) total += counts[i];
    printf("round_trips %ld\n", total);
    return 0;
}
"""


def build_storm(d: str) -> str:
    src, exe = os.path.join(d, "storm.c"), os.path.join(d, "storm")
    with open(src, "w") as f:
        f.write(STORM_C)
    subprocess.run(["cc", "-O2", "-pthread", "-o", exe, src], check=True)
    return exe


def _end_causes(raw: str) -> dict:
    from timeline.rawlog import KIND_END, RawLogReader

    with RawLogReader(raw) as r:
        end = next((b.json() for b in r.blocks() if b.kind == KIND_END), {})
    c = (end.get("drop_causes") or {}).get("sched") or {}
    return {k: sum(c.get(k) or ()) for k in ("full", "refused", "retried")}


def record(exe: str, pairs: int, seconds: float, d: str, extra: list[str]) -> dict:
    raw = os.path.join(d, "storm.tlraw")
    t = time.perf_counter()
    cp = subprocess.run([sys.executable, "-m", "timeline.cli", "record", "--raw-only", "-o", raw, *extra, "--",
                         exe, str(pairs), str(seconds)], capture_output=True, text=True, timeout=600, cwd=REPO)
    wall = time.perf_counter() - t
    if cp.returncode != 0:
        raise SystemExit(cp.stderr)
    counts = {k: int(v.replace(",", "")) for k, v in re.findall(r"(sched_switch|sched_waking) ([\d,]+)", cp.stderr)}
    causes = _end_causes(raw)
    os.unlink(raw)
    return {"recorded": sum(counts.values()), **causes, "wall": wall}


def store_ab(exe: str, seconds: float, runs: int, extra_stores: int, d: str) -> dict[str, list[tuple[int, int]]]:
    """(records, reserves refused with room left) per run, per consumer-position store, alternating."""
    import struct

    from timeline.recorder import Recorder, RecordConfig
    from timeline.ring_reader import RingReader

    new_release = RingReader._release
    u64 = struct.Struct("<Q")

    def old_release(self, pos):
        u64.pack_into(self._cons, 0, pos)

    out: dict[str, list[tuple[int, int]]] = {"struct.pack_into (old)": [], "aligned 8-byte store": []}
    for _ in range(runs):
        for name, release in zip(out, (old_release, new_release)):
            def hammered(self, pos, release=release):
                for _ in range(1 + extra_stores):
                    release(self, pos)
            RingReader._release = hammered
            try:
                raw = os.path.join(d, "ab.tlraw")
                cmd = ["sh", "-c", f"exec {exe} 2 {seconds} >/dev/null"]
                res = Recorder(RecordConfig(raw_path=raw, command=cmd, events=("sched",))).run()
            finally:
                RingReader._release = new_release
            c = res.drop_causes["sched"]
            out[name].append((res.records["sched"], sum(c["retried"]) + sum(c["refused"])))
            os.unlink(raw)
    return out


def consumer_copy_rate() -> float:
    """events/s the recorder's own drain (RingReader.drain: BUSY check, copy,
    kind counts, consumer store) sustains on a full 16 MiB span, over a memfd
    laid out like the kernel's ring (consumer page, producer page, data)."""
    import mmap

    import numpy as np

    from timeline.events import ring_stride
    from timeline.ring_reader import RingReader
    from timeline.sched_records import SCHED_EVENT

    page, size = mmap.PAGESIZE, 16 << 20
    stride = ring_stride(SCHED_EVENT)
    n = size // stride
    fd = os.memfd_create("tl-drain-bench")
    try:
        os.ftruncate(fd, 2 * page + 2 * size)
        with mmap.mmap(fd, 2 * page + 2 * size) as mem:
            recs = np.zeros((n, stride), np.uint8)
            recs[:, :4] = np.frombuffer(np.uint32(SCHED_EVENT.itemsize).tobytes(), np.uint8)  # committed
            mem[2 * page:2 * page + n * stride] = recs.tobytes()
            np.frombuffer(mem, np.uint64, count=1, offset=page)[0] = n * stride  # producer position
            reader = RingReader(fd, size, SCHED_EVENT)
            cons = np.frombuffer(mem, np.uint64, count=1)
            reps, t = 20, time.perf_counter()
            for _ in range(reps):
                cons[0] = 0
                assert len(reader.drain()) == n * stride
            rate = reps * n / (time.perf_counter() - t)
            del cons
            reader.close()
    finally:
        os.close(fd)
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--pairs", default="1,2,4")
    ap.add_argument("--ab-runs", type=int, default=3, help="runs per store in the consumer-position A/B (0: skip)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: run with sudo")
    with tempfile.TemporaryDirectory(prefix="tl-drain-") as d:
        exe = build_storm(d)
        print(f"{'pairs':>5s} {'settings':30s} {'events/s':>10s} {'recorded':>10s} {'lost:full':>10s} "
              f"{'refused':>8s} {'retried':>8s} {'wall s':>7s}")
        rows = [(int(p), "default (16 MiB, 50 ms)", []) for p in args.pairs.split(",")]
        rows.append((2, "1 MiB ring, drained every 2 s", ["--buffer-size", "1", "--flush-interval", "2"]))
        for pairs, label, extra in rows:
            r = record(exe, pairs, args.seconds, d, extra)
            print(f"{pairs:5d} {label:30s} {r['recorded'] / args.seconds:10,.0f} {r['recorded']:10,d} "
                  f"{r['full']:10,d} {r['refused']:8,d} {r['retried']:8,d} {r['wall']:7.2f}")
        if args.ab_runs:
            print("\nconsumer-position store A/B, 2 pairs, alternating runs: reserves the kernel refused with "
                  "room left (retried + refused) per run")
            for extra_stores in (0, 2000):
                ab = store_ab(exe, args.seconds, args.ab_runs, extra_stores, d)
                for name, runs in ab.items():
                    recs = sorted(r for r, _ in runs)
                    print(f"  {'+%d stores/drain' % extra_stores if extra_stores else 'as recorded':18s} "
                          f"{name:24s} refused {[n for _, n in runs]}  (median {recs[len(recs) // 2]:,} records)")
    print(f"\nconsumer copy alone: {consumer_copy_rate() / 1e6:,.0f} M events/s (16 MiB spans, 40-byte records)")


if __name__ == "__main__":
    main()
