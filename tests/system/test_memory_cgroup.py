"""mem and cgroup families on real cgroups: CPU quota throttling, memory-limit
reclaim stalls, an OOM-killed child, each recorded, converted and checked.

Each test makes its own cgroup (v1 controller hierarchy, or cgroup v2 where
the controller is there instead), puts the target in it from a shell that
then execs Python, and removes it afterwards whatever happened.  The targets
wait 0.4 s before their work so the sampler (every 0.1 s) has seen their
cgroup first: the counters count from the first sample that saw it."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import textwrap
import time

import pytest

from timeline.trace_processor import open_trace
from helpers import require_root, timeline_cmd

CG = "/sys/fs/cgroup"
CPU_V1 = {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "20000"}   # 20 % of one CPU
CPU_V2 = {"cpu.max": "20000 100000"}


def _v2_root(controller: str) -> str | None:
    for root in (CG, f"{CG}/unified"):
        try:
            with open(f"{root}/cgroup.controllers") as f:
                if controller in f.read().split():
                    return root
        except OSError:
            pass
    return None


@contextlib.contextmanager
def cgroup(controller: str, v1: dict, v2: dict):
    """A fresh cgroup with these settings: (directory, the label the trace names it by)."""
    require_root()
    name = f"timeline-test-{os.getpid()}-{time.monotonic_ns()}"
    if os.path.exists(f"{CG}/{controller}/cgroup.procs"):
        parent, settings, label = f"{CG}/{controller}", v1, f"{controller}:/{name}"
    else:
        root = _v2_root(controller)
        if root is None:
            pytest.skip(f"no {controller} cgroup controller (v1 or v2) on this machine")
        with open(f"{root}/cgroup.subtree_control", "w") as f:
            f.write(f"+{controller}")
        parent, settings, label = root, v2, f"/{name}"
    path = f"{parent}/{name}"
    os.mkdir(path)
    try:
        for k, v in settings.items():
            if not os.path.exists(f"{path}/{k}"):
                pytest.skip(f"{path}/{k} missing: the kernel lacks that limit")
            with open(f"{path}/{k}", "w") as f:
                f.write(v)
        yield path, label
    finally:
        _remove(path, parent)


def _remove(path: str, parent: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            with open(f"{path}/cgroup.procs") as f:
                for pid in f.read().split():  # a straggler: back to the parent, so the cgroup can go
                    with contextlib.suppress(OSError), open(f"{parent}/cgroup.procs", "w") as g:
                        g.write(pid)
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def record(tmp_path, path: str | None, code: str, *extra: str) -> str:
    """Record `code` (in cgroup directory `path` when given) into a raw log."""
    script = tmp_path / "target.py"
    script.write_text(textwrap.dedent(code))
    cmd = f"exec {sys.executable} {script} {tmp_path}"
    if path:
        cmd = f"echo $$ > {path}/cgroup.procs && {cmd}"
    raw = str(tmp_path / "t.tlraw")
    cp = timeline_cmd("record", "-q", "--raw-only", "-e", "mem,cgroup", "--cgroup-interval", "0.1", *extra,
                      "-o", raw, "--", "sh", "-c", cmd)
    assert cp.returncode == 0, cp.stderr
    return raw


def convert(raw: str, out: str) -> str:
    cp = timeline_cmd("convert", raw, "-o", out)
    assert cp.returncode == 0, cp.stderr
    return out


def findings(trace: str) -> dict[str, list[dict]]:
    """memory_pressure's and cgroup_limits' findings (one `check` run)."""
    cp = timeline_cmd("check", trace, "--only", "memory_pressure,cgroup_limits", "--format", "json")
    assert cp.returncode in (0, 1), cp.stderr
    return {r["id"]: r["findings"] for r in json.loads(cp.stdout)["checks"]}


def counters(tp, glob: str) -> dict[str, float]:
    return dict(tp.query(f"""select t.name, max(c.value) from counter c join counter_track t on c.track_id = t.id
                             where t.name glob '{glob}' group by t.name""").rows)


BUSY = """
    import os, sys, time
    time.sleep(0.4)
    pid = os.fork()   # two busy processes: four times the quota, throttled in nearly every period
    end = time.time() + 1.5
    while time.time() < end:
        pass
    if pid:
        os.waitpid(pid, 0)
    else:
        os._exit(0)
"""


def test_cpu_quota_throttling_is_recorded_and_flagged(tmp_path):
    with cgroup("cpu", CPU_V1, CPU_V2) as (path, label):
        trace = convert(record(tmp_path, path, BUSY), str(tmp_path / "t.pftrace"))
    tp = open_trace(trace)
    try:
        c = counters(tp, f"cgroup {label} cpu.*")
    finally:
        tp.close()
    assert c.get(f"cgroup {label} cpu.nr_throttled", 0) > 0, c
    assert c.get(f"cgroup {label} cpu.throttled_ms", 0) > 0, c
    hits = [f for f in findings(trace)["cgroup_limits"] if label in f["finding"]]
    assert hits and hits[0]["severity"] in ("warning", "error"), hits
    assert "throttled in" in hits[0]["finding"]


def test_no_limit_no_throttling_finding(tmp_path):
    trace = convert(record(tmp_path, None, BUSY), str(tmp_path / "t.pftrace"))
    tp = open_trace(trace)
    try:
        throttled = {k: v for k, v in counters(tp, "cgroup * cpu.nr_throttled").items() if v > 0}
    finally:
        tp.close()
    assert not throttled
    assert not [f for f in findings(trace)["cgroup_limits"] if "throttled" in f["finding"]
                and f["severity"] in ("warning", "error")]


# Page cache under a 16 MiB limit: every read past it makes the thread reclaim.
RECLAIM = """
    import os, sys, time
    time.sleep(0.4)
    path = os.path.join(sys.argv[1], "big.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    for _ in range(64):
        os.write(fd, b"x" * (1 << 20))
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    for _ in range(2):
        os.lseek(fd, 0, 0)
        while os.read(fd, 1 << 20):
            pass
    os.close(fd)
    os.unlink(path)
    time.sleep(0.3)
"""


def test_memory_limit_reclaim_stalls_recorded_and_flagged(tmp_path):
    with cgroup("memory", {"memory.limit_in_bytes": str(16 << 20)},
                {"memory.high": str(16 << 20)}) as (path, label):
        trace = convert(record(tmp_path, path, RECLAIM), str(tmp_path / "t.pftrace"))
    tp = open_trace(trace)
    try:
        stalls = tp.query("""select s.name, count(*), sum(s.dur), t.tid, p.pid
                             from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
                             join process p using (upid)
                             where s.category = 'memory' and s.name glob '* reclaim' group by s.name""").rows
        mem = counters(tp, f"cgroup {label} memory.*")
    finally:
        tp.close()
    assert stalls and stalls[0][1] > 0 and stalls[0][2] > 0 and stalls[0][3] == stalls[0][4], stalls
    found = findings(trace)
    mp = [f for f in found["memory_pressure"] if "reclaim" in f["finding"]]
    assert mp and mp[0]["severity"] in ("info", "warning", "error") and "main thread" in mp[0]["finding"], mp
    assert max(mem.values(), default=0) > 0, mem   # memory.failcnt (v1) or memory.events.high (v2)
    cl = [f for f in found["cgroup_limits"] if label in f["finding"]]
    assert cl and cl[0]["severity"] == "warning", cl


OOM = """
    import subprocess, sys, time
    time.sleep(0.4)
    child = subprocess.run([sys.executable, "-c",
        "import ctypes; ctypes.CDLL(None).prctl(15, b'pt_data_worker', 0, 0, 0)\\n"
        "b = []\\nwhile True: b.append(bytearray(8 << 20))"])
    assert child.returncode == -9, child.returncode
    time.sleep(0.3)
"""


def test_oom_killed_child_is_named(tmp_path):
    with cgroup("memory", {"memory.limit_in_bytes": str(64 << 20)},
                {"memory.max": str(64 << 20)}) as (path, label):
        raw = record(tmp_path, path, OOM)
    trace = convert(raw, str(tmp_path / "t.pftrace"))
    tp = open_trace(trace)
    try:
        killed = tp.query("""select t.name, t.tid, extract_arg(s.arg_set_id, 'debug.victim'),
                                    extract_arg(s.arg_set_id, 'debug.in_job')
                             from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
                             where s.name = 'killed by OOM'""").rows
        marked = tp.query("""select max(c.value) from counter c join process_counter_track t on c.track_id = t.id
                             where t.name = 'oom_killed'""").rows
        mem = counters(tp, f"cgroup {label} memory.*oom_kill")
    finally:
        tp.close()
    assert len(killed) == 1 and killed[0][0] == "pt_data_worker" and killed[0][2] == "pt_data_worker", killed
    assert killed[0][3] in (1, True)
    assert marked == [(1,)]
    assert max(mem.values(), default=0) == 1, mem
    found = findings(trace)
    mp = [f for f in found["memory_pressure"] if "OOM" in f["finding"]]
    assert mp and mp[0]["severity"] == "error" and "pt_data_worker" in mp[0]["finding"], mp
    cl = [f for f in found["cgroup_limits"] if "OOM" in f["finding"]]
    assert cl and cl[0]["severity"] == "error" and label in cl[0]["finding"], cl
    # the Chrome JSON conversion carries the same kill
    js = json.loads(open(convert(raw, str(tmp_path / "t.json"))).read())
    ev = [e for e in js["traceEvents"] if e.get("name") == "killed by OOM"]
    assert len(ev) == 1 and ev[0]["args"]["victim"] == "pt_data_worker", ev


COMPACT = """
    import time
    time.sleep(0.3)
    for _ in range(2):  # compaction of every zone, in this thread (as root): order -1
        with open("/proc/sys/vm/compact_memory", "w") as f:
            f.write("1")
        time.sleep(0.1)
"""


def test_compaction_in_the_thread_is_recorded(tmp_path):
    """mm_compaction_begin/end on a recorded thread: one slice per zone compacted,
    on that thread, with its result.  Requested (order -1) rather than an
    allocation's stall: named so, and not memory pressure."""
    trace = convert(record(tmp_path, None, COMPACT), str(tmp_path / "t.pftrace"))
    tp = open_trace(trace)
    try:
        rows = tp.query("""select s.name, s.dur, t.tid, p.pid, extract_arg(s.arg_set_id, 'debug.order'),
                                  extract_arg(s.arg_set_id, 'debug.result')
                           from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
                           join process p using (upid) where s.category = 'memory'""").rows
    finally:
        tp.close()
    assert len(rows) >= 2, rows  # two requests, each at least one zone
    assert {r[0] for r in rows} == {"requested compaction"}, rows
    assert all(r[1] >= 0 and r[2] == r[3] and r[4] == -1 for r in rows), rows
    assert {r[5] for r in rows} <= {"not_suitable_zone", "skipped", "deferred", "no_suitable_page", "continue",
                                    "complete", "partial_skipped", "contended", "success"}, rows
    assert not [f for f in findings(trace)["memory_pressure"] if "compaction" in f["finding"]]
