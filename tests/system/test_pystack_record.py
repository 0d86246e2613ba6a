"""Python stacks recorded for real (the pystack family), for every CPython here.

One recording per interpreter of `sh -c "TARGET cuda ...; TARGET pipe ..."`
(tests/pystack_target.py): outer() -> middle() -> inner(), whose innermost
line calls the real libcudart's cudaStreamSynchronize through ctypes (no GPU:
it returns 35, after the uprobes fired) in one process and blocks on a pipe
in the other.  The shell is a non-Python process of the tree (no stacks, no
error).  Checked: the stacks the recorder symbolized (exact files and lines),
the `py` arg on the CUDA call slices and on the wait slices, and the stack
samples, through trace_processor; the Chrome JSON output (gzip'd): `sf` on
the call slices, through `stackFrames`.
"""
import gzip
import json
import os
import shlex
import sys

import numpy as np
import orjson
import pytest

from timeline.pystack import records as R
from timeline.pystack.converter import FrameNames
from timeline.trace_processor import open_trace
from helpers import REPO, read_raw, require_root, timeline_cmd
from pystack_pythons import PYTHONS, params
from test_cuda_record import real_cudart, slices

TARGET = os.path.join(REPO, "tests", "pystack_target.py")
SYNCS = 3
WAIT_MS = 400  # longer than the target's linger at exit (0.3 s), which is a wait too


@pytest.fixture(scope="module", params=params())
def run(request, tmp_path_factory):
    require_root()
    python = PYTHONS[request.param]
    d = tmp_path_factory.mktemp("pystack")
    raw, trace = str(d / "run.tlraw"), str(d / "run.pftrace")
    py, tgt = shlex.quote(python), shlex.quote(TARGET)
    script = f"{py} {tgt} cuda {shlex.quote(real_cudart())} {SYNCS}; {py} {tgt} pipe {WAIT_MS}"
    # PYSTACK_TARGET_DELAY: a real job imports for a while before its first
    # synchronization; the recorder finds the interpreter in milliseconds.
    # --py-sample-hz 0: no CPU samples, so the sample tracks carry the stacks
    # taken at calls and waits (tests/system/test_pystack_sampling.py has the samples)
    cp = timeline_cmd("record", "--raw-only", "-e", "cuda,pystack", "--py-sample-hz", "0", "-o", raw,
                      "--cuda-lib", real_cudart(),
                      "--", "/bin/sh", "-c", script, env={**os.environ, "PYSTACK_TARGET_DELAY": "0.2"})
    assert cp.returncode == 0, cp.stderr
    cuda, pipe = (json.loads(line) for line in cp.stdout.strip().splitlines())
    cv = timeline_cmd("convert", raw, "-o", trace)
    assert cv.returncode == 0, cv.stderr
    chrome = str(d / "run.json.gz")
    cv = timeline_cmd("convert", raw, "--format", "chrome", "-o", chrome)
    assert cv.returncode == 0, cv.stderr
    tp = open_trace(trace)
    yield {"cp": cp, "raw": read_raw(raw), "cuda": cuda, "pipe": pipe, "tp": tp, "name": request.param,
           "chrome": chrome}
    tp.close()


def chain(info, inner: str) -> list[tuple[str, str, int]]:
    """The stack the target was in, innermost first: (function, file, line)."""
    f, ln = info["file"], info["lines"]
    return [("inner", f, ln[inner]), ("middle", f, ln["MIDDLE"]), ("outer", f, ln["OUTER"]),
            ("main", f, ln["MAIN"]), ("<module>", f, ln["MODULE"])]


def arg_text(info, inner: str) -> str:
    return " \u2190 ".join(f"{os.path.basename(f)}:{line} {fn}" for fn, f, line in chain(info, inner))


def recorded_stacks(raw) -> dict[tuple[int, int], list[tuple[str, str, int]]]:
    """(pid, stack id) -> frames, from the py_stacks META blocks."""
    frames, out, names = {}, {}, FrameNames()
    for m in raw["metas"]:
        if m["type"] == "py_stacks":
            for code in m.get("codes", []):
                names.code(*code)
            for frame in m["frames"]:
                if len(frame) == 4:
                    frames[frame[0]] = tuple(frame[1:])
                else:
                    names.frame(*frame)
            frames.update(names.named())
            for pid, sid, _flags, ids in m["stacks"]:
                out[(pid, int(sid, 16))] = [frames[i] for i in ids]
    return out


def test_stack_at_cuda_sync_is_the_call_chain(run):
    recs = np.concatenate(run["raw"]["pystack"])
    calls = recs[(recs["kind"] == R.PY_CALL) & (recs["tgid"] == run["cuda"]["pid"])]
    names = run["raw"]["header"]["pystack"]["probes"]
    assert calls.size == SYNCS
    assert {names[str(c)] for c in calls["cookie"].tolist()} == {"cudaStreamSynchronize"}
    assert (calls["tid"] == run["cuda"]["tid"]).all()
    stacks = recorded_stacks(run["raw"])
    for sid in calls["stack_id"].tolist():
        assert stacks[(run["cuda"]["pid"], sid)] == chain(run["cuda"], "INNER_CUDA")
    assert len(set(calls["stack_id"].tolist())) == 1  # one stack, sent once


def test_cuda_call_slices_carry_the_stack(run):
    rows = slices(run["tp"], f"s.name = 'cudaStreamSynchronize' and t.tid = {run['cuda']['tid']}")
    assert len(rows) == SYNCS
    assert [r.get("py") for r in rows] == [arg_text(run["cuda"], "INNER_CUDA")] * SYNCS


def test_wait_slice_carries_the_stack_it_blocked_in(run):
    rows = slices(run["tp"], f"s.category = 'python' and s.name = 'wait' and t.tid = {run['pipe']['tid']}")
    mine = [r for r in rows if r["py"] == arg_text(run["pipe"], "INNER_PIPE")]
    # the read, ending when the write woke it; then, at times, a short wait at the same line:
    # back from the read, the thread waits for the GIL the timer thread still holds
    long = [r for r in mine if r["dur"] >= WAIT_MS * 0.9e6]
    assert len(long) == 1 and long[0]["dur"] < WAIT_MS * 1e6 + 1e9, rows
    assert all(r["dur"] < WAIT_MS * 0.1e6 and r["ts"] >= long[0]["ts"] + long[0]["dur"]
               for r in mine if r is not long[0]), rows
    linger = [r for r in rows if r["py"].startswith(f"pystack_target.py:{run['pipe']['lines']['LINGER']} main ")]
    assert len(linger) == 1 and linger[0]["dur"] >= 0.25e9


def test_stack_samples_resolve_to_the_chain(run):
    """Without CPU sampling, every stack taken is a PerfSample with interned frames; walk them to the root."""
    tp, info = run["tp"], run["cuda"]
    base = os.path.basename(info["file"])
    want = [f"{fn} ({base}:{line})" for fn, _, line in chain(info, "INNER_CUDA")]
    rows = tp.query(f"""select ps.ts, ps.callsite_id from perf_sample ps join thread using (utid)
                        where thread.tid = {info['tid']} order by ps.ts""").rows
    stacks = []
    for _, cs in rows:
        names = []
        while cs is not None:
            name, cs = tp.query(f"""select f.name, c.parent_id from stack_profile_callsite c
                                    join stack_profile_frame f on f.id = c.frame_id where c.id = {cs}""").rows[0]
            names.append(name)
        stacks.append(names)
    assert stacks.count(want) >= SYNCS, stacks  # and the waits in them, if any


def sf_chain(frames: dict, sf) -> list[tuple[str, str]]:
    """(name, category) of a stackFrames entry and its callers, innermost first."""
    out = []
    while sf is not None:
        f = frames[str(sf)]
        out.append((f["name"], f["category"]))
        sf = f.get("parent")
    return out


def test_chrome_json_slices_point_at_their_stack(run):
    """--format chrome, gzip'd: the sync slices' `sf` walks the known chain, exact lines."""
    with gzip.open(run["chrome"], "rb") as f:
        doc = orjson.loads(f.read())
    info = run["cuda"]
    want = [(f"{fn} ({os.path.basename(path)}:{line})", path) for fn, path, line in chain(info, "INNER_CUDA")]
    syncs = [e for e in doc["traceEvents"] if e.get("name") == "cudaStreamSynchronize" and e["tid"] == info["tid"]]
    assert len(syncs) == SYNCS
    assert [sf_chain(doc["stackFrames"], e.get("sf")) for e in syncs] == [want] * SYNCS
    assert [e["args"]["py"] for e in syncs] == [arg_text(info, "INNER_CUDA")] * SYNCS
    waits = [e for e in doc["traceEvents"] if e.get("cat") == "python" and e.get("name") == "wait"
             and e["tid"] == run["pipe"]["tid"] and e["args"]["py"] == arg_text(run["pipe"], "INNER_PIPE")]
    waits = [e for e in waits if e["dur"] >= WAIT_MS * 0.9e3]  # the read (then, at times, a GIL wait: above)
    assert len(waits) == 1 and sf_chain(doc["stackFrames"], waits[0]["sf"])[0][0].startswith("inner (")
    # one entry per distinct (function, file, line, caller): the syncs' stack is there once
    names = [(f["name"], f["category"], f.get("parent")) for f in doc["stackFrames"].values()]
    assert len(names) == len(set(names))


def test_summary_and_no_errors(run):
    err = run["cp"].stderr
    assert "pystack: 2 Python processes" in err, err
    assert "Traceback" not in err and "warning" not in err
    stats = [m for m in run["raw"]["metas"] if m["type"] == "py_stats"][0]
    assert stats["faults"] == 0 and stats["truncated"] == 0 and stats["stacks_lost"] == 0, stats
    # with the cuda family loaded, stacks at calls come through its entry programs (one uprobe
    # consumer a call): the syncs above, one stack each, were taken so
    assert stats["call_hooks"] is True, stats
    # Not checked: unresolved_frames.  A module's top-level code object is freed
    # when its import ends, often before the recorder reads it (a stack taken
    # in an import names that frame "<unresolved>", never wrongly); the stacks
    # checked above are resolved in full.


def _sync_calls(raw: str, *record_args: str) -> tuple[dict, dict, np.ndarray]:
    """Record the target's SYNCS synchronizations in `cuda` mode with record_args; assert each got one
    stack, the call chain; (target info, py_stats, its PY_CALL records)."""
    cp = timeline_cmd("record", "--raw-only", *record_args, "--py-sample-hz", "0", "-o", raw,
                      "--", sys.executable, TARGET, "cuda", real_cudart(), str(SYNCS),
                      env={**os.environ, "PYSTACK_TARGET_DELAY": "0.5"})
    assert cp.returncode == 0, cp.stderr
    info = json.loads(cp.stdout.strip().splitlines()[-1])
    log = read_raw(raw)
    stats = [m for m in log["metas"] if m["type"] == "py_stats"][0]
    recs = np.concatenate(log["pystack"])
    calls = recs[(recs["kind"] == R.PY_CALL) & (recs["tgid"] == info["pid"])]
    assert calls.size == SYNCS
    stacks = recorded_stacks(log)
    assert {tuple(stacks[(info["pid"], sid)]) for sid in calls["stack_id"].tolist()} == {
        tuple(chain(info, "INNER_CUDA"))}
    if stats["call_hooks"]:
        # the cuda program handed its entry time to the hook: each stack's time is its call's
        # record's, to the nanosecond, and the hook read no clock of its own (dur 0)
        cuda = np.concatenate(log["cuda"])
        assert set(calls["ts"].tolist()) <= set(cuda["ts"][cuda["tid"] == info["tid"]].tolist())
        assert (calls["dur"] == 0).all() and (calls["flags"] & R.PYF_HOOKED).all()
    return info, stats, calls


def test_without_the_cuda_family_its_own_uprobes_take_the_stacks(tmp_path):
    """-e pystack alone: no cuda entry programs to run its hook, so pystack
    attaches tl_py_call itself (found in the target's maps once ctypes loads
    the library); each sync still gets one stack, the call chain."""
    require_root()
    _, stats, _ = _sync_calls(str(tmp_path / "run.tlraw"), "-e", "pystack")
    assert stats["call_hooks"] is False, stats


def test_full_cuda_mode_hands_its_entry_time_to_the_hook(tmp_path):
    """The cuda family's full mode (tl_cuda_enter, the syncs' slices made at their return): its hook
    gets the entry time that program stamps the slice with (_sync_calls checks it)."""
    require_root()
    _, stats, _ = _sync_calls(str(tmp_path / "run.tlraw"), "-e", "cuda,pystack", "--cuda-lib", real_cudart())
    assert stats["call_hooks"] is True, stats


def test_entry_only_cuda_mode_takes_the_stacks_through_its_hook(tmp_path):
    """--cuda-mode entry-only: the cuda family's entry-only program (tl_cuda_entry) runs the
    pystack hook as its full mode's program does; each sync gets one stack, the call chain, and its
    call slice the `py` arg naming the line."""
    require_root()
    raw, trace = str(tmp_path / "run.tlraw"), str(tmp_path / "run.pftrace")
    info, stats, calls = _sync_calls(raw, "-e", "cuda,pystack", "--cuda-mode", "entry-only",
                                     "--cuda-lib", real_cudart())
    assert stats["call_hooks"] is True, stats
    assert (calls["flags"] & R.PYF_HOOKED).all()
    cv = timeline_cmd("convert", raw, "-o", trace)
    assert cv.returncode == 0, cv.stderr
    with open_trace(trace) as tp:
        rows = slices(tp, f"s.name = 'cudaStreamSynchronize' and t.tid = {info['tid']}")
    assert len(rows) == SYNCS and {r.get("py") for r in rows} == {arg_text(info, "INNER_CUDA")}, rows
