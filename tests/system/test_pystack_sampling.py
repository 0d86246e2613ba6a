"""CPU sampling of Python stacks (pystack family, --py-sample-hz), real recordings.

tests/pystack_workers.py spin: the main thread spins in spin_outer() ->
spin_middle() -> spin_inner() while a second thread spins in side_spin(),
each for a set amount of its own CPU time.  A per-CPU perf_event timer
samples whichever recorded thread runs: each thread gets about hz samples
per second of its CPU time, with its own stack, as StreamingProfilePacket samples.
"""
import json
import os

import numpy as np
import pytest

from timeline import proc_records
from timeline.pystack import records as pystack_records
from timeline.trace_processor import open_trace
from helpers import REPO, assert_one_row_per_pid_and_tid, read_raw, require_root, timeline_cmd
from pystack_pythons import PYTHONS

WORKERS = os.path.join(REPO, "tests", "pystack_workers.py")
MAIN = next((PYTHONS[n] for n in ("pyenv-3.12", "pyenv-3.11", "pyenv-3.13", "pyenv-3.10", "debian-3.11")
             if n in PYTHONS), None)
CPU_S = 0.6


def line(marker: str) -> int:
    return next(i for i, t in enumerate(open(WORKERS), 1) if t.rstrip().endswith("# " + marker))


def record(tmp_path, *extra):
    require_root()
    if MAIN is None:
        pytest.skip("no supported CPython here")
    trace = str(tmp_path / "spin.pftrace")
    cp = timeline_cmd("record", "-e", "sched,pystack", "-o", trace, *extra, "--", MAIN, WORKERS, "spin", str(CPU_S))
    assert cp.returncode == 0, cp.stderr
    return cp, json.loads(cp.stdout.strip().splitlines()[-1]), open_trace(trace)


def sample_stacks(tp, tid: int) -> list[list[str]]:
    """Each sample of thread tid: its frame names, innermost first."""
    # timer samples: cpu_profile_stack_sample; with sampling off, the stacks at waits: perf_sample
    rows = tp.query(f"""select ps.callsite_id from (select ts, utid, callsite_id from cpu_profile_stack_sample
                                                     union all select ts, utid, callsite_id from perf_sample) ps
                        join thread using (utid) where thread.tid = {tid} order by ps.ts""").rows
    frames = dict(tp.query("""select c.id, f.name || char(1) || coalesce(c.parent_id, -1)
                               from stack_profile_callsite c join stack_profile_frame f on f.id = c.frame_id""").rows)
    out = []
    for (cs,) in rows:
        names = []
        while cs is not None and cs != -1:
            name, parent = frames[cs].split("\x01")
            names.append(name)
            cs = int(parent)
        out.append(names)
    return out


def test_samples_follow_each_threads_cpu_time_and_stack(tmp_path):
    cp, out, tp = record(tmp_path)  # the default rate, 99 Hz
    try:
        spin = f"spin_inner (pystack_workers.py:{line('SPIN')})"
        main = sample_stacks(tp, out["tid"])
        chain = [s for s in main if s[:3] == [spin, "spin_middle (pystack_workers.py:" + str(line("SPIN") + 6) + ")",
                                               "spin_outer (pystack_workers.py:" + str(line("SPIN") + 10) + ")"]]
        # about 99 per CPU second: each 10 ms tick that finds the thread running samples it
        assert 0.6 * 99 * out["main_cpu_s"] <= len(chain) <= 1.3 * 99 * out["main_cpu_s"] + 5, (len(chain), out)
        assert len(chain) >= 0.85 * len(main)  # nearly all of its samples are in the spin
        side = sample_stacks(tp, out["side_tid"])
        in_side = [s for s in side if s[0] == f"side_spin (pystack_workers.py:{line('SIDE')})"]
        assert 0.6 * 99 * out["side_cpu_s"] <= len(in_side) <= 1.3 * 99 * out["side_cpu_s"] + 5, (len(in_side), out)
        assert not any("spin_inner" in n for s in side for n in s)  # no frames of the other thread
    finally:
        tp.close()


def test_python_hotspots_check_names_the_spinning_line(tmp_path):
    cp, out, tp = record(tmp_path)
    tp.close()
    ck = timeline_cmd("check", str(tmp_path / "spin.pftrace"), "--only", "python_hotspots", "--format", "json")
    assert ck.returncode == 0, ck.stderr
    report = json.loads(ck.stdout)
    (res,) = [r for r in report["checks"] if r["id"] == "python_hotspots"]
    top = res["findings"][0]
    assert top["severity"] == "info"
    assert top["finding"].startswith(f"pystack_workers.py:{line('SPIN')} spin_inner: "), top["finding"]
    assert top["evidence"]["self_fraction"] >= 0.8 and top["evidence"]["total_samples"] >= 30


def test_rate_is_an_option_and_zero_turns_sampling_off(tmp_path):
    cp, out, tp = record(tmp_path, "--py-sample-hz", "0")
    try:
        assert "py_sample" not in cp.stderr  # no sample records
        # without CPU samples the stacks at waits fill the sample tracks instead (here: waits for the
        # GIL, which the other thread holds), one per wait slice
        waits = tp.query(f"""select count(*) from slice s join thread_track tt on s.track_id = tt.id
                             join thread using (utid) where s.name = 'wait' and thread.tid = {out['tid']}""").rows
        assert len(sample_stacks(tp, out["tid"])) == waits[0][0] > 0
    finally:
        tp.close()
    cp, out, tp = record(tmp_path, "--py-sample-hz", "300")
    try:
        n = len(sample_stacks(tp, out["tid"]))
        assert 0.6 * 300 * out["main_cpu_s"] <= n <= 1.3 * 300 * out["main_cpu_s"] + 20, (n, out)
    finally:
        tp.close()


EXITERS = """
import threading, time
def spin():
    end = time.perf_counter() + 0.004
    while time.perf_counter() < end:
        pass
for _ in range(60):
    ts = [threading.Thread(target=spin) for _ in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
"""


def test_no_sample_of_a_thread_after_its_exit(tmp_path):
    """240 threads that spin until they exit, sampled at 2 kHz: an exiting thread
    stays tracked until its last switch-out, and a timer firing in its exit path
    (~1 in 20 exits here before the fix) made a sample later than the thread's
    exit record, which trace_processor filed on a second, ghost thread."""
    require_root()
    if MAIN is None:
        pytest.skip("no supported CPython here")
    trace = str(tmp_path / "exit.pftrace")
    cp = timeline_cmd("record", "-e", "sched,pystack", "--py-sample-hz", "2000", "--keep-raw", "-o", trace,
                      "--", MAIN, "-c", EXITERS)
    assert cp.returncode == 0, cp.stderr
    raw = read_raw(str(tmp_path / "exit.tlraw"))
    exits = raw["proc"][raw["proc"]["kind"] == proc_records.PROC_EXIT]
    exit_ts = dict(zip(exits["tid"].tolist(), exits["ts"].tolist()))
    samples = np.concatenate(raw["pystack"])
    samples = samples[samples["kind"] == pystack_records.PY_SAMPLE]
    threads = set(samples["tid"].tolist()) & set(exit_ts) - {int(samples["tgid"][0])}
    assert len(threads) > 100, len(threads)  # the short threads were sampled
    late = [(t, ts - exit_ts[t]) for t, ts in zip(samples["tid"].tolist(), samples["ts"].tolist())
            if t in exit_ts and ts > exit_ts[t]]
    assert not late, late
    with open_trace(trace) as tp:
        assert_one_row_per_pid_and_tid(tp)
