"""What one trace says about its run, as samples the diff can compare: the
steps, the main thread's states per step, CUDA calls, GPU kernels, copies,
launch delays, Python functions and the checks' verdicts.

Everything is read after the checks' prelude (timeline/checks/sql/_prelude.sql),
so "the main thread", "the steady state" and "the DataLoader workers" mean
here what they mean in `timeline check`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

# Calls that block the calling thread until the GPU is done: a training loop
# makes them once per step (a loss read back, a copy of results, an explicit
# synchronize), so their period is the step when nothing else marks steps.
SYNC_CALLS_SQL = """('cudaStreamSynchronize', 'cudaDeviceSynchronize', 'cudaEventSynchronize',
  'cuStreamSynchronize', 'cuCtxSynchronize', 'cuEventSynchronize',
  'cudaMemcpy', 'cudaMemcpy2D', 'cuMemcpy', 'cuMemcpyDtoH', 'cuMemcpyDtoH_v2')"""
MIN_STEPS = 3            # fewer repeats are not a period
MAX_ROWS = 2_000_000     # per query: a crafted trace must not make the diff unbounded

# Main-thread states: thread_state's letters, and the sleeps a DataLoader ended.
STATES = ("running", "runnable", "sleeping", "disk wait", "waiting for DataLoader")

_LINE = re.compile(r":\d+\)$")


@dataclass
class Steps:
    source: str              # 'range' (NVTX), 'sync' or 'run'
    label: str               # the NVTX range or the sync call; the run: 'steady state' / 'whole trace'
    starts: np.ndarray       # ns, sorted
    ends: np.ndarray

    @property
    def durations(self) -> np.ndarray:
        return self.ends - self.starts

    def __len__(self) -> int:
        return len(self.starts)


@dataclass
class Calls:
    """Per name: the duration of each call/kernel (ns), and per step their count and time."""
    durs: dict[str, np.ndarray] = field(default_factory=dict)
    count: dict[str, np.ndarray] = field(default_factory=dict)
    time: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Profile:
    path: str
    context: dict                        # command, machine, kernel release, span, main thread
    families: dict[str, bool]            # the checks' data kinds (checks.catalog DATA), as detected
    steps: Steps
    states: dict[str, np.ndarray]        # state -> ns in it per step (main thread)
    apis: Calls
    kernels: Calls
    memcpy: dict[str, np.ndarray]        # kind -> bytes per step
    memcpy_source: Optional[str]         # 'device' (CUPTI's copies) / 'calls' (the copy calls' args) / None
    launch_delay: np.ndarray             # ns from a launch call's start to its kernel's start
    python: dict[str, int]               # function -> weight (CPU samples, or ns of CUDA calls/waits)
    python_source: Optional[str]         # 'samples' / 'stacks at calls' / None
    checks: object = None                # checks.runner.Report, or None when not run
    have: dict[str, bool] = field(default_factory=dict)  # what this trace can be compared on


def _rows(tp, sql: str) -> list:
    return tp.query(sql).rows[:MAX_ROWS]


def _arrays(rows, n: int) -> list[np.ndarray]:
    cols = list(zip(*rows)) if rows else [()] * n
    return [np.asarray(c) for c in cols]


def per_step(ts: np.ndarray, weight: np.ndarray, steps: Steps) -> np.ndarray:
    """Sum of `weight` over the events starting in each step."""
    if len(steps) == 0:
        return np.zeros(0)
    ts = np.asarray(ts, dtype=np.int64)
    i = np.searchsorted(steps.starts, ts, side="right") - 1
    ok = (i >= 0) & (ts < steps.ends[np.clip(i, 0, None)])
    return np.bincount(i[ok], weights=np.asarray(weight, dtype=np.float64)[ok], minlength=len(steps))


def overlap_per_step(st: np.ndarray, dur: np.ndarray, steps: Steps) -> np.ndarray:
    """Time (ns) covered by the sorted, disjoint intervals [st, st+dur) inside each step."""
    if len(st) == 0:
        return np.zeros(len(steps))
    prefix = np.concatenate(([0], np.cumsum(dur)))

    def covered_before(t):
        i = np.searchsorted(st, t, side="right") - 1
        inside = np.clip(t - st[np.clip(i, 0, None)], 0, dur[np.clip(i, 0, None)])
        return np.where(i >= 0, prefix[np.clip(i, 0, None)] + inside, 0)

    return (covered_before(steps.ends) - covered_before(steps.starts)).astype(np.float64)


def _steady(tp) -> tuple[int, int, str]:
    """The main process' steady state (checks' tl_steady), else the whole trace."""
    rows = _rows(tp, "select ts, end_ts from tl_steady where ts is not null and end_ts > ts")
    if rows:
        return int(rows[0][0]), int(rows[0][1]), "steady state"
    b = _rows(tp, "select start_ts, end_ts from trace_bounds")
    return int(b[0][0] or 0), int(b[0][1] or 0), "whole trace"


def _period_starts(ts: np.ndarray) -> np.ndarray:
    """The calls that start a period: a step often makes its sync calls in a
    burst (a loss read and a log line each read a scalar), so a call close
    after another (under a quarter of the usual gap) belongs to its burst."""
    if len(ts) < 3:
        return ts
    gaps = np.diff(ts)
    usual = np.percentile(gaps, 75)
    return ts[np.concatenate(([True], gaps >= usual / 4))]


def find_steps(tp, skip_startup: bool = True) -> Steps:
    """NVTX steps (the main thread's top-level range name repeated most, by
    time), else the periods of its most frequent synchronizing call, else one
    step: the steady state or the run.  Steps before the steady state (start-up)
    are left out, and so are the pieces of a range a trace set's chunk boundary
    cut (debug arg timeline_cut): a chunk holds only part of that step.
    skip_startup=False: a later chunk of a set, whose start-up was in an
    earlier one (its own first launches are not a start-up)."""
    lo, hi, label = _steady(tp)
    if not skip_startup:
        b = _rows(tp, "select start_ts from trace_bounds")
        lo = min(lo, int(b[0][0] or 0)) if b else lo
    ranges = _rows(tp, f"""
        with top as (select s.ts, s.dur, s.name from slice s join thread_track tt on s.track_id = tt.id
                     where s.category = 'nvtx' and s.dur > 0 and tt.utid = (select utid from tl_main_thread)
                       and extract_arg(s.arg_set_id, 'debug.timeline_cut') is null
                       and not exists (select 1 from ancestor_slice(s.id) a where a.category = 'nvtx')),
             pick as (select name from top group by name having count(*) >= {MIN_STEPS}
                      order by sum(dur) desc limit 1)
        select ts, ts + dur, name from top where name = (select name from pick) order by ts""")
    if ranges:
        st, en, _ = _arrays(ranges, 3)
        keep = st >= lo
        if keep.sum() >= MIN_STEPS:
            st, en = st[keep], en[keep]
        return Steps("range", str(ranges[0][2]), st.astype(np.int64), en.astype(np.int64))
    sync = _rows(tp, f"""
        with calls as (select fn, ts from _tl_cuda where utid = (select utid from tl_main_thread)
                       and fn in {SYNC_CALLS_SQL}),
             pick as (select fn from calls group by fn having count(*) > {MIN_STEPS} order by count(*) desc limit 1)
        select ts, fn from calls where fn = (select fn from pick) order by ts""")
    if sync:
        ts = np.asarray([r[0] for r in sync], dtype=np.int64)
        ts = _period_starts(ts[ts >= lo])  # start-up makes its own syncs (allocations, warm-up)
        if len(ts) > MIN_STEPS:
            return Steps("sync", str(sync[0][1]), ts[:-1], ts[1:])
    return Steps("run", label, np.asarray([lo], dtype=np.int64), np.asarray([max(hi, lo)], dtype=np.int64))


def main_thread_states(tp, steps: Steps) -> dict[str, np.ndarray]:
    """ns per step the main thread spent in each of STATES; a sleep ended by a
    DataLoader worker or the pin-memory thread (its waker, on the runnable state
    after it) is waiting for the DataLoader, not sleeping."""
    if len(steps) == 0:
        return {}
    rows = _rows(tp, f"""
        with st as (select ts, dur, state, lead(waker_utid) over (order by ts) as woke_by
                    from thread_state where utid = (select utid from tl_main_thread))
        select ts, dur, state, woke_by in (select utid from thread where upid in (select upid from _tl_workers)
                                           or name in ('pt_data_worker', 'pt_data_pin')) as loader
        from st where dur > 0 and ts < {int(steps.ends.max())} and ts + dur > {int(steps.starts.min())}
        order by ts""")
    if not rows:
        return {}
    ts, dur, state, loader = _arrays(rows, 4)
    ts, dur = ts.astype(np.int64), dur.astype(np.int64)
    state = state.astype(str)
    loader = loader.astype(bool) if loader.dtype != object else np.asarray([bool(x) for x in loader])
    asleep = (state == "S") | np.char.startswith(state, "D")
    kinds = {
        "running": state == "Running",
        "runnable": np.char.startswith(state, "R") & (state != "Running"),
        "sleeping": (state == "S") & ~loader,
        "disk wait": np.char.startswith(state, "D") & ~loader,
        "waiting for DataLoader": asleep & loader,
    }
    return {k: overlap_per_step(ts[m], dur[m], steps) for k, m in kinds.items()}


def _calls(rows, steps: Steps) -> Calls:
    out = Calls()
    if not rows:
        return out
    names, ts, dur = _arrays(rows, 3)
    ts, dur = ts.astype(np.int64), dur.astype(np.float64)
    lo, hi = steps.starts.min(), steps.ends.max()
    inside = (ts >= lo) & (ts < hi)
    names, ts, dur = names[inside].astype(str), ts[inside], dur[inside]
    for name in np.unique(names):
        m = names == name
        out.durs[name] = dur[m]
        out.count[name] = per_step(ts[m], np.ones(int(m.sum())), steps)
        out.time[name] = per_step(ts[m], dur[m], steps)
    return out


def _memcpy(tp, steps: Steps, device_work: bool) -> tuple[dict[str, np.ndarray], Optional[str]]:
    """Bytes per step per copy kind: the GPU's copies (gpu family) when
    recorded, else the CUDA copy calls' arguments."""
    if device_work:
        rows = _rows(tp, """select coalesce(extract_arg(arg_set_id, 'debug.kind'), extract_arg(arg_set_id, 'args.kind'),
                                            '?'), ts, coalesce(extract_arg(arg_set_id, 'debug.bytes'),
                                                              extract_arg(arg_set_id, 'args.bytes'), 0)
                            from slice where category = 'gpu_memcpy'""")
        source = "device"
    else:
        rows = _rows(tp, """select coalesce(extract_arg(arg_set_id, 'debug.kind'), extract_arg(arg_set_id, 'args.kind'),
                                            iif(fn glob 'cuMemcpyDtoH*', 'D2H', iif(fn glob 'cuMemcpyHtoD*', 'H2D',
                                                '?'))), ts,
                                   coalesce(extract_arg(arg_set_id, 'debug.bytes'), extract_arg(arg_set_id, 'args.bytes'),
                                            extract_arg(arg_set_id, 'debug.count'), 0)
                            from _tl_cuda where fn glob '*emcpy*'""")
        source = "calls"
    if not rows:
        return {}, None
    kind, ts, nbytes = _arrays(rows, 3)
    kind = kind.astype(str)
    nbytes = np.asarray([0.0 if b is None or isinstance(b, (str, bytes)) else float(b) for b in nbytes])
    return {k: per_step(ts[kind == k].astype(np.int64), nbytes[kind == k], steps) for k in np.unique(kind)}, source


def _python(tp, steps: Steps) -> tuple[dict[str, int], Optional[str]]:
    """The main thread's Python functions by weight: its CPU samples (pystack
    --py-sample-hz) by leaf function; else the time of its CUDA calls and
    waits by the innermost frame of their `py` stack."""
    lo, hi = int(steps.starts.min()), int(steps.ends.max())
    rows = _rows(tp, f"""
        select f.name, count(*) from (select ts, utid, callsite_id from perf_sample union all
                                      select ts, utid, callsite_id from cpu_profile_stack_sample) ps
          join thread t using (utid)
          join stack_profile_callsite c on c.id = ps.callsite_id join stack_profile_frame f on f.id = c.frame_id
        where t.tid = (select tid from tl_main_thread) and ps.ts >= {lo} and ps.ts < {hi}
        group by f.name""")
    if rows:
        out: dict[str, int] = {}
        for name, n in rows:
            key = _LINE.sub(")", str(name))  # one function, whatever line the sample hit
            out[key] = out.get(key, 0) + int(n)
        return out, "samples"
    rows = _rows(tp, f"""
        select extract_arg(s.arg_set_id, 'debug.py') as py, sum(s.dur) from slice s
          join thread_track tt on s.track_id = tt.id
        where tt.utid = (select utid from tl_main_thread) and s.dur > 0 and s.ts >= {lo} and s.ts < {hi}
          and extract_arg(s.arg_set_id, 'debug.py') is not null
        group by py""")
    if not rows:
        return {}, None
    out = {}
    for py, ns in rows:
        inner = str(py).split(" <- ")[0].strip()          # "train.py:57 step"
        where, _, fn = inner.partition(" ")
        key = f"{fn or where} ({where.rsplit(':', 1)[0]})" if fn else where
        out[key] = out.get(key, 0) + int(ns or 0)
    return out, "stacks at calls"


def _context(tp, path: str, steps: Steps) -> dict:
    meta = dict(_rows(tp, "select name, coalesce(str_value, cast(int_value as text)) from metadata"))
    main = _rows(tp, """select m.name, m.tid, p.cmdline, m.why from tl_main_thread m
                        left join process p using (upid)""")
    bounds = _rows(tp, "select start_ts, end_ts from trace_bounds")
    span = (bounds[0][1] - bounds[0][0]) if bounds and bounds[0][0] is not None else None
    ranks = _rows(tp, "select distinct rank from _tl_ranks where rank is not null limit 2")
    return {
        "trace": path,
        "command": main[0][2] if main else None,
        "main_thread": f"{main[0][0]} (tid {main[0][1]})" if main else None,
        "machine": " ".join(x for x in (meta.get("system_machine"), meta.get("system_release")) if x) or None,
        "duration_s": round(span / 1e9, 3) if span else None,
        "steps": len(steps) if steps.source != "run" else 0,
        "step_source": steps.source,
        "step_label": steps.label,
        "rank": int(ranks[0][0]) if len(ranks) == 1 else None,  # the trace's one rank (RANK...), if it has one
    }


def profile(tp, path: str, run_checks: bool = True, check_params=None, skip_startup: bool = True) -> Profile:
    """Reads everything the diff compares from a loaded trace (skip_startup: find_steps)."""
    from ..checks.runner import detect_families, prelude_sql
    from ..checks.runner import run_checks as run_all_checks

    report = None
    if run_checks:
        report = run_all_checks(tp, path, params=check_params)  # runs the prelude too
        families = report.families
    else:
        families = detect_families(tp)
        tp.query(prelude_sql())
    steps = find_steps(tp, skip_startup)
    states = main_thread_states(tp, steps)
    apis = _calls(_rows(tp, "select fn, ts, dur from _tl_cuda where dur >= 0"), steps)
    kernels = _calls(_rows(tp, "select name, ts, dur from _tl_gpu where category = 'gpu_kernel'"), steps)
    has_device_work = bool(kernels.durs) or bool(_rows(tp, "select 1 from _tl_gpu limit 1"))
    memcpy, memcpy_source = _memcpy(tp, steps, has_device_work)
    delay = _rows(tp, """select c.ts, g.ts - c.ts from flow f join slice c on c.id = f.slice_out
                         join _tl_gpu g on g.id = f.slice_in
                         where g.category = 'gpu_kernel' and c.category in ('cuda', 'cuda_driver')
                           and g.ts >= c.ts""")
    delay_ts, delay_ns = _arrays(delay, 2)
    in_steps = (delay_ts >= steps.starts.min()) & (delay_ts < steps.ends.max()) if len(delay) else np.zeros(0, bool)
    python, python_source = _python(tp, steps)
    has_main = bool(_rows(tp, "select 1 from tl_main_thread"))
    have = {
        "steps": steps.source != "run",
        "main thread": has_main and bool(states),
        "CUDA calls": bool(_rows(tp, "select 1 from _tl_cuda limit 1")),
        "GPU activity": has_device_work,
        "Python stacks": python_source is not None,
        "checks": report is not None,
    }
    return Profile(path, _context(tp, path, steps), families, steps, states, apis, kernels, memcpy, memcpy_source,
                   np.asarray(delay_ns, dtype=np.float64)[in_steps], python, python_source, report, have)
