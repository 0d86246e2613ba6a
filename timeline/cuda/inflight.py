"""CUDA/NCCL calls in flight right now (issue 15: --hang-timeout).

A traced call's entry is stashed in the thread's BPF task storage
(`cuda_tls`, see cuda.bpf.c) until it returns, and only then becomes a ring
record.  A call that never returns therefore leaves no record; at a hang the
recorder reads each thread's stash (task storage is looked up from user
space by a pidfd of the thread) and writes the calls still open as call
records ending now, without a return value, so the trace shows what each
thread is stuck in and since when.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from . import records as cuda_records

PIDFD_THREAD = os.O_EXCL  # pidfd_open on a thread, not only a process leader (Linux 6.9)
DEPTH = 4
_FRAME = struct.Struct("<QQQ9Q")          # ts, sp, cookie, args[9]
_TLS = struct.Struct("<IIQQ")             # depth, pad, pending_ts, pending_sp
TLS_SIZE = _TLS.size + DEPTH * _FRAME.size
CF_IN_FLIGHT = 0x80  # not from BPF: written by the recorder for a call open at a hang


def open_calls(tls_map, tid: int) -> list[tuple[int, int, tuple]]:
    """(entry ts, cookie, args) of the calls open on thread `tid`, outermost first."""
    try:
        fd = os.pidfd_open(tid, PIDFD_THREAD)
    except OSError:
        return []
    try:
        raw = tls_map.lookup(struct.pack("<i", fd), TLS_SIZE)
    except Exception:  # no storage for this thread (no traced call yet) or an older kernel
        return []
    finally:
        os.close(fd)
    if raw is None:
        return []
    depth = min(_TLS.unpack_from(raw)[0], DEPTH)
    out = []
    for i in range(depth):
        ts, _sp, cookie, *args = _FRAME.unpack_from(raw, _TLS.size + i * _FRAME.size)
        out.append((ts, cookie, tuple(args)))
    return out


def records(calls: list[tuple[int, int, int, int, tuple]], now_ns: int) -> np.ndarray:
    """Ring records for open calls given as (tgid, tid, ts, cookie, args)."""
    recs = np.zeros(len(calls), cuda_records.CUDA_EVENT)
    for r, (tgid, tid, ts, cookie, args) in zip(recs, calls):
        r["ts"], r["dur"], r["cookie"], r["tid"], r["tgid"] = ts, max(now_ns - ts, 0), cookie, tid, tgid
        r["args"] = args
        r["kind"], r["flags"] = cuda_records.CUDA_CALL, CF_IN_FLIGHT
    return recs
