"""Sustained drain rate: how many events/s timeline records without loss (issue 6, workload 3).

    sudo python bench/drain_rate.py [--seconds 3] [--pairs 1,2,4]

A C context-switch storm (pairs of threads ping-ponging a byte over pipes,
compiled here with cc; Python's own overhead would cap the storm long before
the recorder) is recorded with the default settings for each number of
pairs; reported: events/s recorded and dropped.  Then the same storm with a
1 MiB ring drained every 2 s shows what happens past the limit: drops are
counted and reported, and the recorder still finishes on time.

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


def record(exe: str, pairs: int, seconds: float, d: str, extra: list[str]) -> dict:
    raw = os.path.join(d, "storm.tlraw")
    t = time.perf_counter()
    cp = subprocess.run([sys.executable, "-m", "timeline.cli", "record", "--raw-only", "-o", raw, *extra, "--",
                         exe, str(pairs), str(seconds)], capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t
    if cp.returncode != 0:
        raise SystemExit(cp.stderr)
    counts = {k: int(v.replace(",", "")) for k, v in re.findall(r"(sched_switch|sched_waking) ([\d,]+)", cp.stderr)}
    m = re.search(r"([\d,]+) events were dropped", cp.stderr)
    os.unlink(raw)
    return {"recorded": sum(counts.values()), "dropped": int(m.group(1).replace(",", "")) if m else 0,
            "wall": wall}


def consumer_copy_rate() -> float:
    """events/s the drain copy sustains: a full 16 MiB span out of a ring-sized buffer."""
    import numpy as np

    from timeline.events import SCHED_EVENT, ring_stride

    stride = ring_stride(SCHED_EVENT)
    span = np.zeros(16 << 20, np.uint8)
    n = len(span) // stride
    t = time.perf_counter()
    reps = 20
    for _ in range(reps):
        hdr = span[: n * stride].reshape(n, stride)[:, :4].copy().view("<u4").ravel()
        np.flatnonzero(hdr & (1 << 31))
        span[: n * stride].tobytes()
    return reps * n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--pairs", default="1,2,4")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: run with sudo")
    with tempfile.TemporaryDirectory(prefix="tl-drain-") as d:
        exe = build_storm(d)
        print(f"{'pairs':>5s} {'settings':28s} {'events/s':>12s} {'recorded':>11s} {'dropped':>9s} {'wall s':>7s}")
        for pairs in [int(p) for p in args.pairs.split(",")]:
            r = record(exe, pairs, args.seconds, d, [])
            print(f"{pairs:5d} {'default (16 MiB, 50 ms)':28s} {r['recorded'] / args.seconds:12,.0f} "
                  f"{r['recorded']:11,d} {r['dropped']:9,d} {r['wall']:7.2f}")
        r = record(exe, 2, args.seconds, d, ["--buffer-size", "1", "--flush-interval", "2"])
        print(f"{2:5d} {'1 MiB ring, drained every 2 s':28s} {r['recorded'] / args.seconds:12,.0f} "
              f"{r['recorded']:11,d} {r['dropped']:9,d} {r['wall']:7.2f}")
    print(f"\nconsumer copy alone: {consumer_copy_rate() / 1e6:,.0f} M events/s (16 MiB spans, 40-byte records)")


if __name__ == "__main__":
    main()
