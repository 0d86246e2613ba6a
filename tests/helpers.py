"""Shared test helpers (plain functions; shared fixtures live in conftest.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from timeline import events, proc_records, registry, sched_records
from timeline.rawlog import KIND_META, KIND_RING, RawLogReader

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def require_root() -> None:
    """eBPF tests need root. In CI they must fail, never skip."""
    if os.geteuid() == 0:
        return
    if os.environ.get("CI"):
        pytest.fail("eBPF tests must run as root in CI")
    pytest.skip("needs root to load eBPF programs")


def timeline_cmd(*args: str, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 120)
    return subprocess.run([sys.executable, "-m", "timeline.cli", *args], **kw)


def read_raw(path: str) -> dict:
    """Decode a raw log: header, metas, end stats, and records per ring."""
    out = {"metas": [], "sched": [], "proc": [], "end": None}
    with RawLogReader(path) as r:
        out["header"] = r.header
        for blk in r.blocks():
            if blk.kind == KIND_META:
                out["metas"].append(blk.json())
            elif blk.kind == KIND_RING:
                name, dtype = registry.RING_NAMES[blk.ring], registry.RING_DTYPES[blk.ring]
                out.setdefault(name, []).append(events.decode_ring_bytes(blk.payload, dtype))
            else:
                out["end"] = blk.json()
        out["damage"], out["finalized"] = r.damage, r.finalized
    for name in ("sched", "proc"):
        dtype = sched_records.SCHED_EVENT if name == "sched" else proc_records.PROC_EVENT
        out[name] = np.concatenate(out[name]) if out[name] else np.zeros(0, dtype)
    return out


NOBODY = 65534
SUDO_NOBODY = {"SUDO_UID": str(NOBODY), "SUDO_GID": str(NOBODY), "SUDO_USER": "nobody"}


def assert_one_row_per_pid_and_tid(tp) -> None:
    """No ghost rows: every pid is one process and every tid one thread in
    trace_processor, except a pid/tid really reused within the recording (its
    copies then follow each other in time: each later one starts after the
    one before ended)."""
    for table, key in (("process", "pid"), ("thread", "tid")):
        dup = tp.query(f"select {key} from {table} group by {key} having count(*) > 1").rows
        for (ident,) in dup:
            copies = tp.query(f"""select start_ts, end_ts from {table} where {key} = {ident}
                                  order by start_ts""").rows
            ok = all(s is not None and e is not None and e <= s2
                     for (s, e), (s2, _) in zip(copies, copies[1:]))
            assert ok, f"{table} {key} {ident} appears {len(copies)} times: {copies}"
