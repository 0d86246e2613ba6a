"""Python stacks in the shapes real jobs take (pystack family, real recordings):
threads, forked and spawned multiprocessing workers (as DataLoader makes
them), 200-deep recursion (cut, and marked), exec'd code objects freed and
their addresses reused (never a wrong name), a non-Python target (nothing,
no error) and a CPython too old (one summary line).  The target is
tests/pystack_workers.py; waits are found by their `py` arg.
"""
import json
import os
import re
import shutil
import sys

import pytest

from timeline.pystack import records as R
from timeline.trace_processor import open_trace
from helpers import REPO, SUDO_NOBODY, assert_one_row_per_pid_and_tid, require_root, timeline_cmd
from pystack_pythons import OLD, PYTHONS
from test_cuda_record import slices

WORKERS = os.path.join(REPO, "tests", "pystack_workers.py")
# one interpreter for the shapes (any present), every pre-3.12 one for exec'd code (no co_version there)
MAIN = next((PYTHONS[n] for n in ("pyenv-3.12", "pyenv-3.11", "pyenv-3.13", "pyenv-3.10", "debian-3.11")
             if n in PYTHONS), None)


def record(tmp_path, *argv, python=MAIN, extra=()):
    require_root()
    if python is None:
        pytest.skip("no supported CPython here")
    trace = str(tmp_path / "run.pftrace")
    cp = timeline_cmd("record", "-e", "pystack", "-o", trace, *extra, "--", python, WORKERS, *argv)
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout.strip().splitlines()[-1])
    return cp, out, open_trace(trace)


def waits(tp, where="1") -> list[dict]:
    return slices(tp, f"s.category = 'python' and s.name = 'wait' and {where}")


def block_line() -> int:
    return next(i for i, t in enumerate(open(WORKERS), 1) if t.rstrip().endswith("# BLOCK"))


def test_each_thread_has_its_own_stack(tmp_path):
    cp, out, tp = record(tmp_path, "threads")
    try:
        assert len(set(out["threads"].values())) == 3
        for fn, tid in out["threads"].items():
            rows = [r for r in waits(tp, f"t.tid = {tid}") if r["dur"] >= 0.25e9]
            assert len(rows) == 1, (fn, rows)
            assert rows[0]["py"].startswith(f"pystack_workers.py:{block_line()} block \u2190 "
                                            f"pystack_workers.py:"), rows[0]["py"]
            assert f" {fn} \u2190 " in rows[0]["py"] and "run \u2190" in rows[0]["py"]
            assert "blocked_in_thread" not in rows[0]["py"].replace(fn, "")  # no other thread's frames
    finally:
        tp.close()


@pytest.mark.parametrize("how", ["fork", "spawn"])
def test_worker_process_stacks(tmp_path, how):
    cp, out, tp = record(tmp_path, how)
    try:
        rows = [r for r in waits(tp, f"t.tid = {out['worker']}") if r["dur"] >= 0.25e9]
        assert len(rows) == 1, rows
        assert rows[0]["py"].startswith(f"pystack_workers.py:{block_line()} block \u2190 pystack_workers.py:")
        assert re.search(r" worker_wait \u2190 pystack_workers\.py:\d+ worker_main \u2190 ", rows[0]["py"])
        assert rows[0]["pid"] == out["worker"]
    finally:
        tp.close()


def test_deep_recursion_is_cut_and_marked(tmp_path):
    cp, out, tp = record(tmp_path, "deep", extra=("--py-sample-hz", "0"))  # the wait's stack as a sample
    try:
        rows = [r for r in waits(tp, f"t.tid = {out['tid']}") if " recurse \u2190 " in r["py"]]
        assert len(rows) == 1 and rows[0]["dur"] >= 0.15e9, rows
        text = rows[0]["py"]
        assert text.startswith(f"pystack_workers.py:{block_line()} block \u2190 ")
        assert text.endswith(f"... \u2190 <more than {R.PY_MAX_FRAMES} frames>"), text
        # the samples keep every frame taken: the innermost 64, then the marker at the root
        names = []
        cs = tp.query(f"""select ps.callsite_id from perf_sample ps join thread using (utid)
                          where thread.tid = {out['tid']} and ps.ts = {rows[0]['ts']}""").rows[0][0]
        while cs is not None:
            name, cs = tp.query(f"""select f.name, c.parent_id from stack_profile_callsite c
                                    join stack_profile_frame f on f.id = c.frame_id where c.id = {cs}""").rows[0]
            names.append(name)
        assert len(names) == R.PY_MAX_FRAMES + 1
        assert names[-1] == f"<more than {R.PY_MAX_FRAMES} frames>"
        assert all(n.startswith("recurse (") for n in names[1:-1])
    finally:
        tp.close()


@pytest.mark.parametrize("name", ["pyenv-3.10", "pyenv-3.11", "pyenv-3.12"])
@pytest.mark.parametrize("same", ["0", "1", "2"])
def test_freed_code_objects_never_get_a_wrong_name(tmp_path, name, same):
    """exec'd functions, freed after one call each: their addresses may be
    reused at once (same=2: copies of one function that differ only in their
    file name, each at the address of the last).  Every wait names the
    generated file of the call it lies in, or nothing (a call may block more
    than once: a page fault's sleep in D state is a wait too)."""
    if name not in PYTHONS:
        pytest.skip(f"{name} not installed")
    n = 60
    cp, out, tp = record(tmp_path, "exec", str(n), same, python=PYTHONS[name], extra=("--py-wait-min-us", "0"))
    try:
        calls = out["calls"]
        named = set()
        for r in waits(tp, f"t.tid = {out['tid']}"):
            m = re.search(r" \u2190 (generated_\d+\.py):2 (gen\w*) \u2190 ", r["py"])
            if not m:
                assert "generated_" not in r["py"], r["py"]
                continue
            i = next((i for i, (t0, t1) in enumerate(calls) if t0 <= r["ts"] <= t1), None)
            assert i is not None, ("a wait named generated code outside every call", r)
            assert (m.group(1), m.group(2)) == (f"generated_{i}.py", "gen" if same != "0" else f"gen_{i}"), r
            named.add(i)
        assert len(named) >= n * 0.9  # and nearly all named (a few may be freed before they are read)
        if same == "2":
            assert out["code_addresses"] < n / 2  # the case meant: addresses taken again
    finally:
        tp.close()


def test_non_python_target_records_nothing_and_says_nothing(tmp_path):
    require_root()
    raw = str(tmp_path / "r.tlraw")
    cp = timeline_cmd("record", "--raw-only", "-e", "sched,pystack", "-o", raw, "--", "/bin/sleep", "0.3")
    assert cp.returncode == 0, cp.stderr
    assert "pystack" not in cp.stderr and "Traceback" not in cp.stderr
    assert "py_call_stack" not in cp.stderr and "py_wait_stack" not in cp.stderr


def test_unsupported_python_is_one_summary_line(tmp_path):
    require_root()
    if not OLD:
        pytest.skip("no CPython older than 3.10 here")
    raw = str(tmp_path / "r.tlraw")
    cp = timeline_cmd("record", "--raw-only", "-e", "sched,pystack", "-o", raw, "--", OLD[-1], "-c",
                      "import time; time.sleep(0.5)")
    assert cp.returncode == 0, cp.stderr
    lines = [line for line in cp.stderr.splitlines() if "pystack" in line]
    assert len(lines) == 1, cp.stderr
    assert re.search(r"pystack: no Python stacks for pid \d+: \S+python3\.9\S*: CPython 3\.9 is not supported "
                     r"\(3\.10 to 3\.13 are\)", lines[0]), lines[0]


def test_sudo_mode_reads_as_the_user(udir):
    """In sudo mode the target runs as the user; its maps and its interpreter's
    ELF file are opened as that user (safe_input), and its stacks are named."""
    require_root()
    python = PYTHONS.get("debian-3.11")  # readable by nobody, unlike pyenv's under /root
    if python is None:
        pytest.skip("no system CPython here")
    script = shutil.copy(WORKERS, os.path.join(udir, "pystack_workers.py"))
    os.chmod(script, 0o644)
    trace = os.path.join(udir, "sudo.pftrace")
    cp = timeline_cmd("record", "-e", "pystack", "-o", trace, "--", python, script, "deep",
                      env={**os.environ, **SUDO_NOBODY})
    assert cp.returncode == 0, cp.stderr
    assert "pystack: 1 Python process, CPython 3.11" in cp.stderr, cp.stderr
    assert os.stat(trace).st_uid == 65534
    with open_trace(trace) as tp:
        rows = [r for r in waits(tp) if " recurse \u2190 " in r["py"]]
        assert len(rows) == 1 and rows[0]["py"].startswith(f"pystack_workers.py:{block_line()} block ")


def test_dataloader_workers_samples_make_no_ghost_rows(tmp_path):
    """CPU samples of DataLoader workers that exit before the recording ends: each sample
    sequence's thread descriptor is timestamped at its first sample, so trace_processor files
    it under the live worker (untimed, it took the latest time read, past the worker's exit,
    and made a second copy of the process)."""
    require_root()
    trace = str(tmp_path / "dl.pftrace")
    cp = timeline_cmd("record", "-e", "sched,pystack", "-o", trace, "--", sys.executable,
                      os.path.join(REPO, "examples", "train_dataloader.py"), "--steps", "20", "--batch", "8",
                      "--data", str(tmp_path / "data"), timeout=240)
    assert cp.returncode == 0, cp.stderr
    with open_trace(trace) as tp:
        assert_one_row_per_pid_and_tid(tp)
        assert tp.query("select count(*) from cpu_profile_stack_sample").rows[0][0] > 0
