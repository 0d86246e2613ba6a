"""Block requests -> async slices per disk, plus per-disk counters.

Slices: track '<disk> I/O' (e.g. 'vda I/O'), category 'block_io', name
'read' / 'write' / 'flush' / 'discard' / ..., from queue insertion to
completion; args dev ('major:minor'), disk, sector, bytes, rw (rwbs as
blktrace prints it), tid and pid (the submitter), thread (its name),
queue_ns (insert -> issue), device_ns (issue -> completion), status when not 0.

Counters (global tracks): '<disk> read_bytes_per_s', '<disk> write_bytes_per_s'
and '<disk> latency_ms' (mean insert -> completion of the requests completed)
per BIN_NS bin, and '<disk> in_flight' (requests of the tree queued or on the
device) exactly at each change.
"""
from __future__ import annotations

import numpy as np

from .. import events as ev
from ..converters.families import FamilyConverter
from . import block_records
from .devices import kdev

BIN_NS = 100_000_000
OPS = {0: "read", 1: "write", 2: "flush", 3: "discard", 5: "secure_erase", 7: "zone_append", 9: "write_zeroes"}
_OP_RWBS = {0: "R", 1: "W", 2: "F", 3: "D", 5: "DE"}


def rwbs(op: int, flags: int) -> str:
    s = "F" if flags & block_records.BF_PREFLUSH else ""
    s += _OP_RWBS.get(op, "N")
    for bit, c in ((block_records.BF_FUA, "F"), (block_records.BF_RAHEAD, "A"), (block_records.BF_SYNC, "S"),
                   (block_records.BF_META, "M")):
        if flags & bit:
            s += c
    return s


def disk_name(r) -> str:
    name = ev.cstr(r["disk"])
    return name or "{}:{}".format(*kdev(int(r["dev"])))


class BlockConverter(FamilyConverter):
    rings = (block_records.RING_BLOCK,)

    def __init__(self, model):
        super().__init__(model)
        # disk -> list of (done_ts, bytes, is_write, latency, start_ts, ends_request)
        self.per_disk: dict[str, list[np.ndarray]] = {}

    def scan_ring(self, ring, recs) -> None:
        for disk in np.unique(recs["disk"]).tolist():
            r = recs[recs["disk"] == disk]
            name = disk_name(r[0])
            self.per_disk.setdefault(name, []).append(r[["ts", "done_ts", "bytes", "op", "flags"]].copy())

    def emit_ring(self, sink, ring, recs) -> None:
        recs = recs[np.argsort(recs["ts"], kind="stable")]
        c = {k: recs[k].tolist() for k in ("ts", "issue_ts", "done_ts", "sector", "tid", "tgid", "dev", "bytes",
                                            "op", "flags", "status", "disk")}
        for i in range(recs.size):
            op, flags, tid = c["op"][i], c["flags"][i], c["tid"][i]
            ts, issue, done = c["ts"][i], c["issue_ts"][i], c["done_ts"][i]
            disk = ev.cstr(c["disk"][i])
            dev = "{}:{}".format(*kdev(c["dev"][i]))
            args = {
                "dev": dev, "disk": disk, "sector": c["sector"][i], "bytes": c["bytes"][i], "rw": rwbs(op, flags),
                "tid": tid, "pid": c["tgid"][i], "thread": self.model.thread_name(tid) or None,
                "queue_ns": issue - ts if issue else None, "device_ns": done - issue if issue else None,
                "status": c["status"][i] or None, "partial": True if flags & block_records.BF_PARTIAL else None,
            }
            sink.async_slice(f"{disk or dev} I/O", ts, done - ts, OPS.get(op, f"op{op}"), "block_io", args)

    def finish(self, sink) -> None:
        for disk, parts in sorted(self.per_disk.items()):
            a = np.concatenate(parts)
            self._rates(sink, disk, a)
            self._in_flight(sink, disk, a)

    @staticmethod
    def _rates(sink, disk: str, a: np.ndarray) -> None:
        done = a["done_ts"].astype(np.int64)
        b0 = int(done.min()) // BIN_NS
        bins = done // BIN_NS - b0
        n = int(bins.max()) + 2  # one idle bin after the last completion brings counters back to 0
        write = a["op"] == 1
        read = a["op"] == 0
        nbytes = a["bytes"].astype(np.float64)
        rd = np.bincount(bins[read], nbytes[read], n) * (1e9 / BIN_NS)
        wr = np.bincount(bins[write], nbytes[write], n) * (1e9 / BIN_NS)
        cnt = np.bincount(bins, minlength=n)
        lat = np.bincount(bins, (done - a["ts"].astype(np.int64)) / 1e6, n)
        lat = np.divide(lat, cnt, out=np.zeros(n), where=cnt > 0)
        for name, series in (("read_bytes_per_s", rd), ("write_bytes_per_s", wr), ("latency_ms", lat)):
            if not series.any():
                continue  # e.g. no writes at all: no track
            last = None
            for i in range(n):
                v = float(series[i])
                if v != last:  # counters are step functions: write changes only
                    sink.counter(f"{disk} {name}", (b0 + i) * BIN_NS, v)
                    last = v

    @staticmethod
    def _in_flight(sink, disk: str, a: np.ndarray) -> None:
        ends = (a["flags"] & block_records.BF_PARTIAL) == 0  # a partial completion does not end its request
        starts = a["ts"].astype(np.int64)
        # A request with partial completions has one record per chunk: only
        # its first chunk opens it (later chunks start at the previous end).
        first = np.ones(a.size, bool)
        cont = set(a["done_ts"][~ends].astype(np.int64).tolist())
        first = np.array([int(s) not in cont for s in starts], bool) if cont else first
        ts = np.concatenate([starts[first], a["done_ts"][ends].astype(np.int64)])
        delta = np.concatenate([np.ones(int(first.sum()), np.int64), -np.ones(int(ends.sum()), np.int64)])
        order = np.lexsort((-delta, ts))  # at equal ts, count arrivals before departures
        level = np.cumsum(delta[order])
        ts = ts[order]
        for i in range(ts.size):
            if i + 1 < ts.size and ts[i + 1] == ts[i]:
                continue  # one point per timestamp: the level after all its changes
            sink.counter(f"{disk} in_flight", int(ts[i]), int(level[i]))
