"""gpu_breakdown's per-step idle share and host_gpu_gaps' blocked time per gap
are computed by sorted sweeps (issue 23: the joins they replace were quadratic).
Checked here against the plain definitions, computed in Python from the same
rows, on a seeded random trace with the awkward cases: one process feeding two
GPUs (its idle gaps overlap each other), blocking calls on two threads that
overlap each other and cover gaps in part or in full, kernels crossing step
boundaries, calls and kernels sharing timestamps."""
from __future__ import annotations

import random

import pytest

from test_query_check import LOADER_TID, PID, TID, Events, sched_base, us
from timeline.checks import run_checks
from timeline.trace_processor import open_trace

SPAN_US = 400_000
BLOCKING = ("cudaStreamSynchronize", "cudaMemcpy", "cudaMalloc")


def sweep_trace(d) -> str:
    d.mkdir()
    base = sched_base(d, SPAN_US)
    rnd = random.Random(23)
    ev = Events()
    main = ev.track(pid=PID, tid=TID, thread_name="python3")
    loader = ev.track(pid=PID, tid=LOADER_TID, thread_name="loader")
    streams = {dev: ev.track(f"GPU {dev} · stream 7", parent=ev.track(f"GPU {dev}")) for dev in (0, 1)}
    gpu_free, corr, t = {0: 0, 1: 0}, 0, 2000
    while t < SPAN_US - 20_000:  # steps on the main thread: launches, now and then a sync
        step_ts = t
        t += 1
        for _ in range(rnd.randint(3, 12)):
            if rnd.random() < 0.2:
                dur = rnd.choice([5, 50, 400, 1500])
                ev.slice(main, us(t), dur * 1000, "cudaStreamSynchronize", "cuda", ret=0)
                t += dur + rnd.choice([0, 1, 30])
            corr += 1
            dev = rnd.choice((0, 1))
            ev.slice(main, us(t), 5000, "cudaLaunchKernel", "cuda", flow_out=corr, kernel="k", ret=0)
            begin = max(t + 3, gpu_free[dev] + rnd.choice([0, 0, 20, 300, 900]))
            gpu_free[dev] = begin + rnd.choice([10, 100, 700, 2500])
            ev.slice(streams[dev], us(begin), (gpu_free[dev] - begin) * 1000, "k", "gpu_kernel", flow_in=corr,
                     device=dev, stream=7, correlation_id=corr)
            t += 5 + rnd.choice([0, 3, 50, 600])
        ev.slice(main, us(step_ts), (t - step_ts) * 1000, "train_step", "nvtx", domain="default")
        t += rnd.choice([0, 1, 200])
    t = 1000
    while t < SPAN_US - 20_000:  # the loader thread's blocking calls, overlapping the main thread's
        dur = rnd.choice([2, 100, 800, 3000])
        ev.slice(loader, us(t), dur * 1000, rnd.choice(BLOCKING[1:]), "cuda", ret=0)
        t += dur + rnd.choice([1, 300, 2000])
    out = d / "trace.pftrace"
    out.write_bytes(base + ev.data())
    return str(out)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    path = sweep_trace(tmp_path_factory.mktemp("sweep") / "t")
    with open_trace(path, engine="wasm") as tp:
        rep = run_checks(tp, path, only=["gpu_breakdown", "host_gpu_gaps"])
        q = {name: tp.query(sql).rows for name, sql in {
            "gaps": "select gap_id, upid, ts, dur, device from _tl_hg_gap",
            "blocked": "select gap_id, blocked from _tl_hg_blocked",
            "calls": "select upid, ts, dur from _tl_cuda where fn in ('cudaStreamSynchronize', 'cudaMemcpy', "
                     "'cudaMalloc')",
            "kernels": "select device, ts, dur from _tl_gpu",
            "steps": "select step, ts, dur, device, idle from _tl_gb_step",
        }.items()}
    return {r.check.id: r for r in rep.results}, q


def test_blocked_time_is_the_sum_of_overlaps(tables):
    results, q = tables
    assert results["host_gpu_gaps"].status not in ("failed", "not recorded"), results["host_gpu_gaps"]
    blocked = dict(q["blocked"])
    # both GPUs' gaps, in one process: they overlap each other
    assert len({g[1] for g in q["gaps"]}) == 1 and {g[4] for g in q["gaps"]} == {0, 1}
    partly = fully = 0
    for gap_id, upid, ts, dur, _ in q["gaps"]:
        want = sum(max(0, min(c_ts + c_dur, ts + dur) - max(c_ts, ts))
                   for c_upid, c_ts, c_dur in q["calls"] if c_upid == upid)
        assert (blocked.get(gap_id) or 0) == want, (gap_id, ts, dur)
        partly += 0 < want < dur
        fully += want >= dur
    assert partly >= 5 and fully >= 1 and len(q["gaps"]) >= 50  # the cases above happened


def test_step_idle_share_against_the_union_of_kernels(tables):
    results, q = tables
    assert results["gpu_breakdown"].status not in ("failed", "not recorded"), results["gpu_breakdown"]
    busy: dict[int, list[list[int]]] = {}
    for device, ts, dur in sorted(q["kernels"], key=lambda r: (r[0], r[1])):
        runs = busy.setdefault(device, [])
        if runs and ts <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], ts + dur)
        else:
            runs.append([ts, ts + dur])
    assert len(q["steps"]) >= 2 * 50 and {r[3] for r in q["steps"]} == {0, 1}
    shares = []
    for step, ts, dur, device, idle in q["steps"]:
        covered = sum(max(0, min(b, ts + dur) - max(a, ts)) for a, b in busy[device])
        assert idle == pytest.approx(1 - covered / dur, abs=1e-12), (step, device)
        shares.append(idle)
    assert min(shares) < 0.5 < max(shares) and any(0 < s < 1 for s in shares)
