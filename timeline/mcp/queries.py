"""What the MCP tools compute on a loaded trace (a trace_processor `tp`):
a summary, one thread over a window, the top CUDA calls / GPU kernels /
Python functions.  Plain dicts of JSON values; times in ns and ms, and
`start_s` offsets from the trace's start (as `timeline check --format json`
gives them)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..checks.runner import detect_families, prelude_sql
from ..python_buckets import without_stack

MAX_PROCESSES = 50
MAX_CMDLINE = 500
# thread_state's letters (trace_processor), as words
STATE_NAMES = {"Running": "running", "R": "runnable", "R+": "runnable (preempted)", "S": "sleeping",
               "D": "uninterruptible sleep (disk/driver wait)", "DK": "uninterruptible sleep (killable)",
               "I": "idle (kernel thread)", "T": "stopped", "t": "traced", "X": "dead", "Z": "zombie",
               "W": "waking", "P": "parked", "N": "no load"}


@dataclass(frozen=True)
class TopKind:
    """What top_calls ranks: rows of one kind of data (a family's, by its check data name)."""
    data: str                # the data it needs (detect_families)
    missing: str             # the note when the trace lacks it
    note: str                # what the rows are
    per_thread: bool         # tid narrows it to one thread
    source: str = ""         # SQL giving (name, dur) in the window {lo}..{hi}, {who}: the thread's condition


# The one place these tools name families' data (tests/unit/test_family_registry.py allows it).
TOP_KINDS = {
    "cuda": TopKind("cuda", "no CUDA calls recorded in this trace",
                    "CPU time of the API calls (runtime, driver, NCCL), by function, most total time first", True,
                    """select replace(replace(s.name, '_ptsz', ''), '_ptds', '') as name, s.dur from slice s
                       join thread_track tt on s.track_id = tt.id
                       where s.category in ('cuda', 'cuda_driver', 'nccl') and s.ts >= {lo} and s.ts < {hi}
                         and s.dur >= 0 {who}"""),
    "kernels": TopKind("gpu", "no GPU kernels in this trace (record with -e ...,gpu)",
                       "GPU execution time of the kernels, by name, most total time first", False,
                       """select s.name, s.dur from slice s
                          where s.category = 'gpu_kernel' and s.ts >= {lo} and s.ts < {hi} and s.dur >= 0"""),
    "python": TopKind("pystack", "no Python stack samples in this trace (record with -e ...,pystack)",
                      "CPU samples of the thread's Python stacks, by function (name and file); self: in the "
                      "function itself, total: anywhere on the stack (once per sample); hottest_line: where most "
                      "of its self samples were", True),
}


def _one(tp, sql: str) -> dict:
    rows = tp.query(sql).as_dicts()
    return rows[0] if rows else {}


def _meta(tp, key: str):
    """A timeline metadata entry (cr-<key> or cr-<n>-<key>), the last one written."""
    row = _one(tp, f"select str_value, int_value from metadata where name glob 'cr-*{key}' "
                   "order by length(name) desc, name desc limit 1")
    return row.get("str_value") if row.get("str_value") is not None else row.get("int_value")


def _ms(ns) -> Optional[float]:
    return None if ns is None else round(ns / 1e6, 3)


def bounds(tp) -> tuple[int, int]:
    row = _one(tp, "select start_ts, end_ts from trace_bounds")
    return row.get("start_ts") or 0, row.get("end_ts") or 0


def window(tp, start_s: Optional[float], end_s: Optional[float]) -> tuple[int, int]:
    """[start, end) in trace ns from offsets in seconds from the trace's start (None: its edge)."""
    t0, t1 = bounds(tp)
    lo = t0 if start_s is None else t0 + int(start_s * 1e9)
    hi = t1 if end_s is None else t0 + int(end_s * 1e9)
    if hi <= lo:
        raise ValueError(f"the window is empty (start_s={start_s}, end_s={end_s}; the trace lasts "
                         f"{(t1 - t0) / 1e9:.3f} s)")
    return lo, hi


def summary(tp, fd: int) -> dict:
    """Command, duration, processes and their roles, main thread, families,
    drops, completeness of the trace on `fd` (loaded into `tp`)."""
    from ..checks.completeness import completeness_problem

    families = detect_families(tp)
    tp.query(prelude_sql())
    t0, t1 = bounds(tp)
    command_pid = _meta(tp, "timeline_command_pid")
    main = _one(tp, "select tid, name, pid, process_name, why from tl_main_thread")
    command = None
    pid = command_pid if command_pid is not None else main.get("pid")
    if pid is not None:
        command = _one(tp, f"select cmdline from process where pid = {int(pid)} and cmdline is not null "
                           "order by upid limit 1").get("cmdline")
    problem = completeness_problem(tp, fd=fd)
    return {
        "command": _clip(command),
        "command_pid": command_pid,
        "duration_s": round((t1 - t0) / 1e9, 6),
        "trace_start_ns": t0,
        "trace_end_ns": t1,
        "timeline_version": _meta(tp, "timeline_version"),
        "host": _meta(tp, "timeline_host"),
        "kernel": _one(tp, "select str_value from metadata where name = 'system_release'").get("str_value"),
        "families": families,
        "main_thread": main or None,
        "processes": processes(tp),
        "slices_by_category": {r["category"] or "": r["n"] for r in tp.query(
            "select category, count(*) as n from slice group by category order by n desc").as_dicts()},
        "drops": drops(tp),
        "complete": problem is None,
        "incomplete": problem,
    }


def _clip(text: Optional[str]) -> Optional[str]:
    if text is None or len(text) <= MAX_CMDLINE:
        return text
    return text[:MAX_CMDLINE] + f"... ({len(text):,} characters)"


def processes(tp) -> dict:
    """The processes that ran (busiest first) with their role: the training
    process, DataLoader workers, ranks."""
    rows = tp.query("""
        select p.upid, p.pid, n.name, p.cmdline, pp.pid as parent_pid, r.run_ns,
          (select count(*) from thread t where t.upid = p.upid) as threads,
          (select rank from _tl_ranks k where k.upid = p.upid) as rank,
          p.upid = (select upid from tl_main_thread) as main,
          p.upid in (select upid from _tl_workers) as worker
        from process p join _tl_proc_run r using (upid) left join _tl_pname n using (upid)
        left join process pp on pp.upid = p.parent_upid
        order by r.run_ns desc""").as_dicts()
    out = []
    for r in rows[:MAX_PROCESSES]:
        roles = (["training process (main thread)"] if r["main"] else []) + \
                (["DataLoader worker"] if r["worker"] else []) + \
                ([f"rank {r['rank']}"] if r["rank"] is not None else [])
        out.append({"pid": r["pid"], "name": r["name"], "cmdline": _clip(r["cmdline"]),
                    "parent_pid": r["parent_pid"], "cpu_s": round(r["run_ns"] / 1e9, 4),
                    "threads": r["threads"], "roles": roles})
    return {"count": len(rows), "listed": out, "truncated": len(rows) > MAX_PROCESSES}


def drops(tp) -> dict:
    """Records lost: per family (the recorder's 'timeline: <ring> records
    dropped' counters, cumulative) and the total the trace's last packet gives."""
    per = {r["name"][len("timeline: "):-len(" records dropped")]: int(r["n"] or 0) for r in tp.query(
        """select t.name, max(c.value) as n from counter_track t join counter c on c.track_id = t.id
           where t.name glob 'timeline: * records dropped' group by t.name""").as_dicts()}
    overrun = _one(tp, "select sum(value) as n from stats where name = 'ftrace_cpu_overrun_end'").get("n")
    return {"total": _meta(tp, "timeline_dropped"), "by_ring": per, "kernel_overrun": overrun}


def pick_thread(tp, tid: Optional[int], rank: Optional[int]) -> dict:
    """The thread to describe: `tid`, the main thread of `rank`, or the main
    training thread (prelude tables loaded)."""
    if tid is not None and rank is not None:
        raise ValueError("give tid or rank, not both")
    if rank is not None:
        row = _one(tp, f"select utid from _tl_ranks where rank = {int(rank)} limit 1")
        if not row:
            ranks = [r[0] for r in tp.query("select rank from _tl_ranks order by rank").rows]
            raise ValueError(f"no rank {rank} in this trace (ranks: {ranks or 'none'})")
        utid, why = row["utid"], f"main thread of rank {rank}"
    elif tid is not None:
        # one tid can be split into several utids: take the one with the scheduling data
        row = _one(tp, f"""select t.utid from thread t left join _tl_run r using (utid) where t.tid = {int(tid)}
                           order by coalesce(r.run_ns, -1) desc limit 1""")
        if not row:
            raise ValueError(f"no thread {tid} in this trace")
        utid, why = row["utid"], "asked for"
    else:
        row = _one(tp, "select utid, why from tl_main_thread")
        if not row:
            raise ValueError("no main thread found (the trace has no scheduling data of a process)")
        utid, why = row["utid"], f"main training thread ({row['why']})"
    info = _one(tp, f"""select t.utid, t.tid, t.name, p.pid, n.name as process_name from thread t
                        left join process p using (upid) left join _tl_pname n using (upid) where t.utid = {utid}""")
    info["picked"] = why
    return info


def describe_thread(tp, tid=None, rank=None, start_s=None, end_s=None, top: int = 10) -> dict:
    """Where one thread's time went over a window: its states (running,
    runnable, sleeping, disk wait ...) and its slices with the most time."""
    families = detect_families(tp)
    tp.query(prelude_sql())
    lo, hi = window(tp, start_s, end_s)
    t0, _ = bounds(tp)
    th = pick_thread(tp, tid, rank)
    utid = int(th.pop("utid"))
    def clip(t=""):  # the part of each interval inside the window
        return f"min({t}ts + {t}dur, {hi}) - max({t}ts, {lo})"
    states = tp.query(f"""
        select state, sum({clip()}) as ns, count(*) as n from thread_state
        where utid = {utid} and ts < {hi} and ts + dur > {lo} and dur >= 0
        group by state order by ns desc""").as_dicts()
    span = hi - lo
    slices = tp.query(f"""
        select s.category, s.name, count(*) as n, sum({clip('s.')}) as ns,
          max(s.dur) as max_ns
        from slice s join thread_track tt on s.track_id = tt.id
        where tt.utid = {utid} and s.ts < {hi} and s.ts + s.dur > {lo} and s.dur > 0
        group by s.category, s.name order by ns desc limit {int(top)}""").as_dicts()
    return {
        "thread": th,
        "window": {"start_s": round((lo - t0) / 1e9, 6), "end_s": round((hi - t0) / 1e9, 6),
                   "seconds": round(span / 1e9, 6)},
        "families": families,
        "states": [{"state": STATE_NAMES.get(r["state"], r["state"]), "code": r["state"],
                    "ms": _ms(r["ns"]), "share": round(r["ns"] / span, 4), "intervals": r["n"]} for r in states],
        "top_slices": [{"category": r["category"], "name": r["name"], "count": r["n"], "ms": _ms(r["ns"]),
                        "share": round(r["ns"] / span, 4), "max_ms": _ms(r["max_ns"])} for r in slices],
        "note": "shares are of the window; nested slices each count their own time, so slices can sum past 1",
    }


def _durations(tp, source: str, top: int) -> list[dict]:
    """Per name in `source` (a query with name, dur): count, total, median,
    p90 and max, most total time first."""
    rows = tp.query(f"""
        with d as (select name, dur, row_number() over (partition by name order by dur) as i,
                          count(*) over (partition by name) as n from ({source}))
        select name, max(n) as n, sum(dur) as total, max(dur) as max_ns,
          max(case when i = (n + 1) / 2 then dur end) as median,
          max(case when i = max(1, cast(0.9 * n + 0.999999 as int)) then dur end) as p90
        from d group by name order by total desc limit {int(top)}""").as_dicts()
    return [{"name": r["name"], "count": r["n"], "total_ms": _ms(r["total"]), "median_us": _us(r["median"]),
             "p90_us": _us(r["p90"]), "max_us": _us(r["max_ns"])} for r in rows]


def _us(ns) -> Optional[float]:
    return None if ns is None else round(ns / 1e3, 2)


def top(tp, what: str, limit: int = 20, start_s=None, end_s=None, tid=None) -> dict:
    """The rows of TOP_KINDS[what] with the most time in the window (tid:
    only that thread's, where the kind is per thread)."""
    kind = TOP_KINDS.get(what)
    if kind is None:
        raise ValueError(f"what must be one of {', '.join(TOP_KINDS)}, not {what!r}")
    families = detect_families(tp)
    tp.query(prelude_sql())
    lo, hi = window(tp, start_s, end_s)
    t0, _ = bounds(tp)
    out = {"what": what, "window": {"start_s": round((lo - t0) / 1e9, 6), "end_s": round((hi - t0) / 1e9, 6)}}
    if not families.get(kind.data):
        return {**out, "rows": [], "note": kind.missing}
    thread = pick_thread(tp, tid, None) if tid is not None and kind.per_thread else None
    if kind.source:
        who = f"and tt.utid = {int(thread['utid'])}" if thread else ""
        rows = _durations(tp, kind.source.format(lo=lo, hi=hi, who=who), limit)
        return {**out, "thread": _public(thread), "rows": rows, "note": kind.note}
    return {**out, **_samples(tp, lo, hi, thread or pick_thread(tp, None, None), limit), "note": kind.note}


def _public(thread: Optional[dict]) -> Optional[dict]:
    return None if thread is None else {k: v for k, v in thread.items() if k != "utid"}


def _samples(tp, lo, hi, thread, limit) -> dict:
    """The thread's stack samples in the window, by function."""
    tp.query(f"""
        create or replace perfetto table _tl_mcp_py as
        select ps.id, ps.callsite_id from (select id * 2 as id, ts, utid, callsite_id from perf_sample union all
                                           select id * 2 + 1, ts, utid, callsite_id from cpu_profile_stack_sample) ps
        where ps.utid = {int(thread['utid'])} and ps.callsite_id is not null and ps.ts >= {lo} and ps.ts < {hi}""")
    n = _one(tp, "select count(*) as n from _tl_mcp_py")["n"]
    # a frame is "function (file:line)": a function is its name and file, and counts once per sample
    rows = tp.query(f"""
        with frames as (
          select s.id as sid, 1 as leaf, f.name from _tl_mcp_py s
            join stack_profile_callsite c on c.id = s.callsite_id join stack_profile_frame f on f.id = c.frame_id
          union all
          select s.id, 0, f.name from _tl_mcp_py s, experimental_ancestor_stack_profile_callsite(s.callsite_id) a
            join stack_profile_frame f on f.id = a.frame_id),
        split as (
          select sid, leaf, name, iif(instr(name, ' (') > 0, substr(name, 1, instr(name, ' (') - 1), name) as fn,
            iif(instr(name, ' (') > 0, rtrim(substr(name, instr(name, ' (') + 2), ')'), '') as at from frames),
        parts as (
          select sid, leaf, fn, iif(instr(at, ':') > 0, substr(at, 1, instr(at, ':') - 1), at) as file,
            iif(instr(at, ':') > 0, cast(substr(at, instr(at, ':') + 1) as int), null) as line from split)
        select fn, file, sum(leaf) as self, count(distinct sid) as total,
          (select p2.line from parts p2 where p2.fn = p.fn and p2.file = p.file and p2.leaf = 1
           group by p2.line order by count(*) desc limit 1) as hot_line
        from parts p group by fn, file order by self desc, total desc limit {int(limit)}""").as_dicts()
    return {"thread": _public(thread), "samples": n,
            "rows": [{"function": r["fn"], "file": r["file"], "hottest_line": r["hot_line"],
                      "self_samples": r["self"], "total_samples": r["total"],
                      "self_share": round(r["self"] / n, 4) if n else None,
                      "total_share": round(r["total"] / n, 4) if n else None,
                      # a one-frame stack of samples taken without one: counted, but no function; why
                      **({"without_stack": why} if (why := without_stack(r["fn"], r["file"])) else {})}
                     for r in rows]}
