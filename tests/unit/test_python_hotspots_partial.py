"""python_hotspots' partial (timeline/checks/partials/python_hotspots.py): the pystack family's CPU
samples on a training process (test_check_partials.training_log: the main thread issues the most
launches; its start-up ends at k4's first launch, its steady state at its last CUDA call's end),
converted once as one trace (the SQL, wasm trace_processor) and once as a set of 5 ms chunks (the
index's partial): the same findings, or no partial where the SQL's answer hangs on its row order."""
from __future__ import annotations

import json

import numpy as np
import pytest

from rawlog_factory import BOOT0
from test_check_partials import sql_findings, training_log
from test_gpu_convert import PID, TID, WORKER, us
from timeline import events as ev
from timeline.checks.partials import python_hotspots as ph
from timeline.checks.traceset import FROM_INDEX, check_set
from timeline.converters import convert
from timeline.converters.trace_set import SplitSpec
from timeline.identity import invoking_user
from timeline.pystack import probes
from timeline.pystack import records as PY
from timeline.trace_processor import TraceProcessorConfig

CHECK = "python_hotspots"
OFFSET = 5_000_123  # BOOTTIME - MONOTONIC: not whole microseconds, so a timer sample's time is floored
STEADY = (us(2400), us(18975) + 5000)  # k4's first launch; the last launch call's end
FRAMES = [[0, "inner", "/w/train.py", 12], [1, "step", "/w/train.py", 57], [2, "main", "/w/train.py", 90],
          [3, "<module>", "/w/train.py", 95], [4, "load", "/w/data.py", 7], [5, "inner", "/w/lib/train.py", 30],
          [6, "helper", "", 0], [7, "inner", "/w/train.py", 13]]
# stack id -> frames, innermost first: C recurses (step twice: counted once in its total), D's inner is
# another file of the same name (one function to the SQL, which only sees "train.py"), E has no file
STACKS = {0xA: [0, 1, 2, 3], 0xB: [4, 2, 3], 0xC: [7, 1, 1, 2, 3], 0xD: [5, 2, 3], 0xE: [6, 2, 3], 0xF: [1, 2, 3]}
LOST = 0x99  # a stack id the log never describes: '<Python stack lost>'
NO_FRAME, FAULT = (0, PY.PYF_NO_FRAME), (0, PY.PYF_FAULT)
CALL = -1  # (flags) a stack taken at a call rather than a wait
# one cycle of the main thread's samples: inner 9 (line 12) + 4 (13) + 2 (30), load 5, helper 3, step 1,
# buckets: no frame 2, unreadable 1, lost 1
CYCLE = ([(0xA, 0)] * 9 + [(0xB, 0)] * 5 + [(0xC, 0)] * 4 + [(0xD, 0)] * 2 + [(0xE, 0)] * 3 + [(0xF, 0)]
         + [NO_FRAME] * 2 + [FAULT] + [(LOST, 0)])


def hotspot_log(main=CYCLE * 12, worker=CYCLE * 3, sample_hz=99, edges=True, within=(1000, 24000)):
    """training_log plus CPU samples (sample_hz 0: waits, the samples without the timer): `main` on the
    main thread from 1 ms to 24 ms (start-up, steady state, after the last CUDA call), `worker` on
    another thread (within: from, to, us, instead); edges: a sample each just inside and just outside both ends of the steady state,
    as trace_processor times them (a timer sample's time is its MONOTONIC microsecond)."""
    g = training_log(steps=40, slow={})
    g.span_us = 30_000
    base = g.builder

    def builder():
        b = base()
        b.header["clock"]["monotonic_ns"] = b.header["clock"]["boottime_ns"] - OFFSET
        b.header["pystack"] = {"probes": probes.table(), "max_frames": 64, "sample_hz": sample_hz}
        b.blocks.append(("meta", {"type": "py_stacks", "ts": us(1), "frames": FRAMES,
                                  "stacks": [[PID, f"{sid:x}", 0, idx] for sid, idx in STACKS.items()]}))
        a0, a1 = within
        rows = [(us(a0) + i * ((a1 - a0) * 1000 // len(main)) + 311, sid, flags, TID)
                for i, (sid, flags) in enumerate(main)]
        rows += [(us(1000) + i * (23_000_000 // max(len(worker), 1)) + 7, sid, flags, WORKER)
                 for i, (sid, flags) in enumerate(worker)]
        if edges:  # raw times inside [lo, hi] whose microsecond falls outside, and the other way
            lo, hi = STEADY
            rows += [(lo + 100, 0xF, 0, TID), (lo + 500, 0xF, 0, TID), (hi + 100, 0xB, 0, TID),
                     (hi - 1000 + 200, 0xB, 0, TID)] if sample_hz else [
                # stacks at calls of no known function (no slice): exact times, right at both ends
                (lo - 1, 0xF, CALL, TID), (lo, 0xF, CALL, TID), (hi, 0xB, CALL, TID), (hi + 1, 0xB, CALL, TID)]
        rows.sort()
        a = np.zeros(len(rows), PY.PY_EVENT)
        for k, (t, sid, flags, tid) in enumerate(rows):
            kind = PY.PY_SAMPLE if sample_hz else PY.PY_WAIT
            if flags == CALL:
                kind, flags = PY.PY_CALL, 0
            a[k] = (t, 0 if sample_hz else 1000, sid, tid, PID, 250 if kind == PY.PY_CALL else 0, 0, kind, flags)
        b.header["rings"][str(PY.RING_PYSTACK)] = {"name": "pystack", "record_size": PY.PY_EVENT.itemsize,
                                                   "stride": ev.ring_stride(PY.PY_EVENT)}
        for i in range(0, a.size, 64):  # several batches
            b.blocks.append(("ring", (PY.RING_PYSTACK, ev.encode_ring_bytes(a[i:i + 64]))))
        return b
    g.builder = builder
    return g


def both_ways(tmp_path, g, params=None):
    """(SQL status and findings on the one trace, the set's CheckResult, the set's index)."""
    raw = g.write(tmp_path / "run.tlraw", block=200)
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    res = convert(raw, str(tmp_path / "set.pftrace"), split=SplitSpec(duration_ns=5_000_000))
    with open(f"{res.out_path}/index.json") as f:
        index = json.load(f)
    got = check_set(res.out_path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=[CHECK], workers=1,
                    params=params).results[0]
    want = sql_findings(one, CHECK) if not params else _sql_with(one, params[CHECK])
    return want, got, index


def _sql_with(path, params):
    from timeline.checks.runner import run_checks
    from timeline.trace_processor import open_trace
    with open_trace(path, engine="wasm") as tp:
        r = next(x for x in run_checks(tp, path, only=[CHECK], params={CHECK: params}).results)
    return r.status, r.findings


def same(tmp_path, g, params=None):
    (status, want), got, index = both_ways(tmp_path, g, params)
    assert CHECK in index.get("partials", {}), index.get("partials")
    assert len(index["chunks"]) >= 4
    assert got.note == FROM_INDEX
    assert (got.status, got.findings) == (status, want)
    return status, want


def test_partial_gives_the_sql_findings(tmp_path):
    status, want = same(tmp_path, hotspot_log())
    assert status == "info"
    texts = [f.message for f in want]
    assert texts[0].startswith("train.py:12 inner: "), texts
    assert [t.split(":")[0] for t in texts[:4]] == ["train.py", "data.py", "", "train.py"], texts
    assert texts[2].startswith(":? helper"), texts
    assert any("record was lost" in t for t in texts[4:]) and any("could not be read" in t for t in texts[4:])
    # the edges: of the 4 samples there, 2 in the steady state as trace_processor times them
    step = next(f for f in want if " step: " in f.message)
    assert step.evidence["total_samples"] > step.evidence["self_samples"]


def test_other_top(tmp_path):
    same(tmp_path, hotspot_log(), params={CHECK: {"top": 2}})


def test_without_the_cpu_timer(tmp_path):
    """sample_hz 0: the stacks at waits are the samples (perf_sample, exact times)."""
    status, want = same(tmp_path, hotspot_log(sample_hz=0))
    assert status == "info" and want[0].message.startswith("train.py:12 inner: ")


def test_no_sample_of_the_main_thread(tmp_path):
    status, want = same(tmp_path, hotspot_log(main=[], edges=False))
    assert status == "n/a", want


@pytest.mark.parametrize("case", ["self_tie", "line_tie"])
def test_no_partial_where_the_sql_answer_hangs_on_row_order(tmp_path, case):
    """Two functions with the same self count (the SQL orders them as its engine likes), a hottest line
    tied with another: the index's partial gives no answer (the set falls back to its chunks)."""
    cycle = ([(0xA, 0)] * 4 + [(0xB, 0)] * 4 + [(0xE, 0)] if case == "self_tie"
             else [(0xA, 0)] * 3 + [(0xC, 0)] * 3 + [(0xB, 0)])
    (status, want), got, index = both_ways(tmp_path, hotspot_log(main=cycle * 10, edges=False,
                                                                    within=(3000, 18000)))
    assert CHECK in index["partials"]  # written: the tie is the merge's to see (another top may have none)
    assert got.note != FROM_INDEX
    assert ph.merge(index["partials"][CHECK], [{}] * len(index["chunks"]), {"top": 5}) is None
    selfs = [f.evidence["self_samples"] for f in want]
    if case == "self_tie":
        assert selfs[0] == selfs[1], want
        assert ph.merge(index["partials"][CHECK], [], {"top": 1}) is None  # the tie is at the cut
    else:  # inner: 30 at line 12, 30 at line 13
        assert selfs[0] == 60 and want[0].message.startswith("train.py:1"), want


def test_split_name_follows_the_sql():
    assert ph.split_name("inner (train.py:12)") == ("inner", "train.py", 12)
    assert ph.split_name("helper") == ("helper", "", None)
    assert ph.split_name("a:b (x.py:3)") == ("a:b (x.py", "", None) or ph.split_name("a:b (x.py:3)") is None
    assert BOOT0  # (the factory's clock, which OFFSET moves)
