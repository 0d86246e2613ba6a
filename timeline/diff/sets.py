"""`timeline diff` on more than one trace a side: a trace set (NAME.tlset/,
a recording split in time) is profiled chunk by chunk and the profiles
merged into one; a directory of per-rank traces (as `timeline check DIR`
takes) is compared rank by rank, and pooled (all ranks' steps together).

A chunk's profile holds only whole steps: find_steps leaves out the pieces
of an NVTX range a chunk boundary cut, and a sync period is a span between
two calls of one chunk, so a step across a boundary is in no chunk (left
out, not counted twice).  Start-up steps are left out in the first chunk
with CUDA calls only (a start-up longer than that chunk is not seen).  Chunks that cut their steps differently from the
set's most (start-up: no syncs yet) are left out of the merge.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import UserError
from ..terminal import printable
from .profile import Calls, Profile, Steps

SET_STEPS_NOTE = "steps across a chunk boundary are left out"


# -------------------------------------------------------------- merging

def _cat(parts: list[Profile], get) -> dict[str, np.ndarray]:
    """Per name, the parts' per-step arrays end to end (zeros where a part has none)."""
    names = sorted({n for p in parts for n in get(p)})
    return {n: np.concatenate([np.asarray(get(p).get(n, np.zeros(len(p.steps))), dtype=np.float64)
                               for p in parts]) for n in names}


def _cat_durs(parts: list[Profile], get) -> dict[str, np.ndarray]:
    names = sorted({n for p in parts for n in get(p)})
    return {n: np.concatenate([np.asarray(get(p).get(n, np.zeros(0)), dtype=np.float64) for p in parts])
            for n in names}


@dataclass
class Merged:
    profile: Profile
    used: list[int]        # indices of the parts merged
    left_out: list[int]    # parts whose steps are cut otherwise (or missing while others have them)


def merge_profiles(parts: list[Profile], path: str) -> Merged:
    """One profile of several (a set's chunks in time order, or ranks): steps
    and per-step arrays end to end, call durations pooled, Python weights
    added.  When some parts mark steps, only those whose steps are cut alike
    (the kind with most steps) are merged."""
    if not parts:
        raise ValueError("no profiles to merge")
    stepped = [i for i, p in enumerate(parts) if p.have.get("steps")]
    if stepped:
        kinds: Counter = Counter()
        for i in stepped:
            kinds[(parts[i].steps.source, parts[i].steps.label)] += len(parts[i].steps)
        kind = kinds.most_common(1)[0][0]
        used = [i for i in stepped if (parts[i].steps.source, parts[i].steps.label) == kind]
    else:
        used = list(range(len(parts)))
    ps = [parts[i] for i in used]
    lead = max(ps, key=lambda p: len(p.steps))
    steps = Steps(lead.steps.source, lead.steps.label,
                  np.concatenate([p.steps.starts for p in ps]).astype(np.int64),
                  np.concatenate([p.steps.ends for p in ps]).astype(np.int64))
    sources = Counter(p.python_source for p in ps if p.python_source)
    python_source = sources.most_common(1)[0][0] if sources else None
    python: dict[str, int] = {}
    for p in ps:
        if p.python_source == python_source:
            for k, v in p.python.items():
                python[k] = python.get(k, 0) + v
    memcpy_sources = [p.memcpy_source for p in ps if p.memcpy_source]
    families = {k: any(p.families.get(k) for p in parts) for p in parts for k in p.families}
    have = {k: any(p.have.get(k) for p in ps) for p in ps for k in p.have}
    have["steps"] = bool(stepped)
    have["Python stacks"] = python_source is not None
    context = {**lead.context, "trace": path, "steps": len(steps) if stepped else 0,
               "duration_s": round(sum(p.context.get("duration_s") or 0 for p in parts), 3),
               "step_source": steps.source, "step_label": steps.label}
    # a chunk that shows no rank (its process label's main thread did nothing in it) does
    # not contradict the others; two different ranks do
    ranks = {p.context.get("rank") for p in parts} - {None}
    context["rank"] = ranks.pop() if len(ranks) == 1 else None
    merged = Profile(path, context, families, steps,
                     _cat(ps, lambda p: p.states),
                     Calls(_cat_durs(ps, lambda p: p.apis.durs), _cat(ps, lambda p: p.apis.count),
                           _cat(ps, lambda p: p.apis.time)),
                     Calls(_cat_durs(ps, lambda p: p.kernels.durs), _cat(ps, lambda p: p.kernels.count),
                           _cat(ps, lambda p: p.kernels.time)),
                     _cat(ps, lambda p: p.memcpy), memcpy_sources[0] if memcpy_sources else None,
                     np.concatenate([np.asarray(p.launch_delay, dtype=np.float64) for p in ps]),
                     python, python_source, None, have)
    return Merged(merged, used, [i for i in range(len(parts)) if i not in used])


# -------------------------------------------------------------- inputs

def input_kind(path: str) -> str:
    """'trace', 'set' (a trace set directory) or 'ranks' (a directory of traces)."""
    from ..checks.traceset import is_trace_set
    from ..trace_file import PERFETTO_SUFFIXES

    if not os.path.lexists(path):
        raise UserError(f"{printable(path)} does not exist")
    if not os.path.isdir(path):
        return "trace"
    if is_trace_set(path):
        return "set"
    try:
        names = os.listdir(path)
    except OSError as e:
        raise UserError(f"cannot list {printable(path)}: {e.strerror}") from None
    if any(n.endswith(PERFETTO_SUFFIXES) for n in names):
        return "ranks"
    raise UserError(f"{printable(path)} is a directory with neither a trace set index (index.json) "
                    "nor Perfetto traces (*.pftrace)")


def rank_traces(path: str) -> list[str]:
    from ..trace_file import PERFETTO_SUFFIXES

    return sorted(os.path.join(path, n) for n in os.listdir(path)
                  if n.endswith(PERFETTO_SUFFIXES) and os.path.isfile(os.path.join(path, n)))


def _profile_one(job):
    """Worker: one trace's profile, or an error line."""
    path, tp_config, user, checks, check_params, skip_startup = job
    from ..trace_processor import TraceProcessorError
    from .compare import _first_line, _load
    from .profile import profile

    try:
        tp = _load(path, tp_config, user)
    except UserError as e:
        return str(e)
    try:
        return profile(tp, path, run_checks=checks, check_params=check_params, skip_startup=skip_startup)
    except TraceProcessorError as e:
        return f"{printable(path)}: cannot read it: {_first_line(e)}"
    finally:
        tp.close()


def profile_many(paths: list[str], tp_config, user, checks: bool, check_params, role: str,
                 skip_startup: Optional[list[bool]] = None, workers: Optional[int] = None) -> list[Profile]:
    """Each trace's profile, in a pool of forked workers (one engine each)."""
    from ..checks.fleet import run_pool

    skip = skip_startup or [True] * len(paths)
    outs = run_pool(_profile_one, [(p, tp_config, user, checks, check_params, s) for p, s in zip(paths, skip)],
                    workers)
    bad = next((o for o in outs if isinstance(o, str)), None)
    if bad is not None:
        raise UserError(f"{role}: {bad}")
    return outs


def profile_set(path: str, tp_config, user, checks: bool, check_params, role: str,
                progress=None) -> tuple[Profile, list[str]]:
    """A trace set's merged profile (checks: the set's own merged checks, as
    `timeline check SET` runs them) and notes on what was left out."""
    from ..checks.traceset import read_index

    chunks = read_index(path, user)
    if progress:
        progress(f"reading the {role}, {os.path.basename(os.path.normpath(path))} ({len(chunks)} chunks)")
    # The run's start-up (before its steady state) is in the first chunk with
    # its main activity (CUDA calls, GPU work); a later chunk's first launches are not one.
    from ..registry import MAIN_ACTIVITY

    first = next((i for i, c in enumerate(chunks) if set(MAIN_ACTIVITY) & set(c.get("families") or ())), 0)
    parts = profile_many([c["path"] for c in chunks], tp_config, user, False, None, role,
                         [i <= first for i in range(len(chunks))])
    merged = merge_profiles(parts, path)
    notes = [f"the {role} is a trace set of {len(chunks)} chunks: {SET_STEPS_NOTE}"]
    if merged.left_out and merged.profile.have.get("steps"):
        from ..checks.traceset import _chunk_list

        notes.append(f"the {role}'s {_chunk_list(merged.left_out, len(chunks))} have no "
                     f"{merged.profile.steps.source} '{merged.profile.steps.label}' steps and are left out")
    if checks:
        from ..checks.traceset import NOT_MERGED, check_set

        if progress:
            progress(f"checking the {role}'s chunks")
        report = check_set(path, tp_config, user, params=check_params)
        # A check not merged across chunks judges each chunk as a whole run:
        # its verdict is not comparable with a whole trace's, nor another set's.
        per_chunk = [r.check.id for r in report.results if r.note == NOT_MERGED]
        report.results = [r for r in report.results if r.note != NOT_MERGED]
        if per_chunk:
            notes.append(f"checks not compared (the {role}'s are per chunk, not merged): {', '.join(per_chunk)}")
        merged.profile.checks = report
        merged.profile.have["checks"] = True
    return merged.profile, notes


# -------------------------------------------------------------- rank directories

def rank_keys(profiles: list[Profile]) -> Optional[list[str]]:
    """'rank N' per trace when every trace has one rank, each different; else None."""
    ranks = [p.context.get("rank") for p in profiles]
    if None in ranks or len(set(ranks)) != len(ranks):
        return None
    return [f"rank {r}" for r in ranks]


def compare_rank_dirs(dir_a: str, dir_b: str, tp_config, user, checks: bool, check_params, progress=None,
                      **judge):
    """Rank by rank (matched by rank number, else by file name), and all
    ranks' steps pooled: the pooled report, with the per-rank reports and the
    ranks only one side has in its `ranks`."""
    from .compare import compare_profiles
    from .report import RankDiff, RankSet

    sides = []
    for role, d in (("baseline", dir_a), ("candidate", dir_b)):
        paths = rank_traces(d)
        if progress:
            progress(f"reading the {role}, {len(paths)} traces in {os.path.basename(os.path.normpath(d))}")
        sides.append((paths, profile_many(paths, tp_config, user, checks, check_params, role)))
    (paths_a, prof_a), (paths_b, prof_b) = sides
    keys_a, keys_b = rank_keys(prof_a), rank_keys(prof_b)
    matched_by = "rank" if keys_a and keys_b else "file name"
    if matched_by == "file name":
        keys_a, keys_b = [os.path.basename(p) for p in paths_a], [os.path.basename(p) for p in paths_b]
    by_b = dict(zip(keys_b, range(len(prof_b))))
    per_rank = []
    for key, pa, path_a in zip(keys_a, prof_a, paths_a):
        j = by_b.get(key)
        if j is not None:
            per_rank.append(RankDiff(key, path_a, paths_b[j], compare_profiles(pa, prof_b[j], **judge)))
    if not per_rank:
        raise UserError(f"no rank is in both {printable(dir_a)} and {printable(dir_b)} "
                        f"(matched by {matched_by}: {', '.join(keys_a[:4])} against {', '.join(keys_b[:4])})")
    common = {r.key for r in per_rank}
    pool_a = merge_profiles([p for k, p in zip(keys_a, prof_a) if k in common], dir_a).profile
    pool_b = merge_profiles([p for k, p in zip(keys_b, prof_b) if k in common], dir_b).profile
    report = compare_profiles(pool_a, pool_b, **judge)
    report.notes.append(f"all ranks pooled ({len(per_rank)} in both, matched by {matched_by}); "
                        "the checks are compared per rank")
    report.ranks = RankSet(matched_by, per_rank, [k for k in keys_a if k not in common],
                           [k for k in keys_b if k not in common])
    return report
