"""The MCP server: timeline's checks and queries as tools, over stdio.

Built with the official SDK's MCPServer (FastMCP before mcp 2).  Every
tool is read-only: paths are checked against the allowed directories
(paths.AllowedDirs) here, before a worker process (worker.py) reads the
trace; nothing is written."""
from __future__ import annotations

from typing import Any, Optional

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from .. import __version__
from ..errors import UserError
from .paths import AllowedDirs, find_traces
from .queries import TOP_KINDS
from .readonly_sql import WritingSql, check_read_only
from .worker import WorkerError, Workers

SQL_TIMEOUT_S = 30.0
MAX_SQL_TIMEOUT_S = 600.0
MAX_ROWS = 10_000
MAX_SQL_CHARS = 1 << 20

INSTRUCTIONS = """\
timeline records Python ML training (CPU scheduling, CUDA calls, GPU kernels, DataLoader, I/O,
Python stacks) into Perfetto traces. Start with list_traces, then trace_summary (what the trace
holds and who is who), then run_checks (the built-in diagnoses: input stalls, CPU contention,
launch latency, syncs, allocator churn, GPU idle, stragglers, hangs ...). Drill down with
describe_thread and top_calls; sql answers anything else (read-only PerfettoSQL). Times are
trace nanoseconds (ts, dur) or seconds from the trace's start (start_s, end_s)."""

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)


def build_server(allowed: AllowedDirs, engine: str = "auto", tp_bin: Optional[str] = None) -> MCPServer:
    # WARNING: the SDK logs every call at INFO on stderr, which MCP clients show as noise
    server = MCPServer("timeline", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    workers = Workers(engine, tp_bin)

    def resolve(path: str) -> str:
        try:
            return allowed.resolve(path)
        except UserError as e:
            raise ToolError(str(e)) from None

    def job(name: str, trace: str, args: dict, limit_s=None) -> dict:
        real = resolve(trace)
        try:
            return workers.run(name, real, trace, args, limit_s)
        except WorkerError as e:
            raise ToolError(str(e)) from None

    def tool(fn):
        return server.tool(annotations=READ_ONLY)(fn)

    @tool
    def list_traces(directory: Optional[str] = None) -> dict[str, Any]:
        """List the trace files (.pftrace, .json, .json.gz, raw .tlraw logs) in the allowed
        directories, or in one directory inside them, newest first, with size, time and kind.
        Use it first to find what to investigate. Returns {allowed, traces: [{path, bytes,
        modified, kind}], count, truncated}."""
        from ..identity import invoking_user

        try:
            return find_traces(allowed, directory, invoking_user())
        except UserError as e:
            raise ToolError(str(e)) from None

    @tool
    def trace_summary(trace: str) -> dict[str, Any]:
        """Summarize one trace: the command recorded, duration, the processes with their roles
        (training process, DataLoader workers, ranks) and CPU time, the main training thread,
        which data families it holds (sched, cuda, gpu, pystack, block_io ...), records dropped,
        and whether the trace is complete. Use it before anything else on a trace."""
        return job("summary", trace, {})

    @tool
    def list_checks() -> dict[str, Any]:
        """The built-in checks: id, title, the data each needs, why it matters, the usual fix, and
        its parameters (thresholds) with defaults. Use it to choose `only` and `params` for
        run_checks."""
        from ..checks import CATALOG

        return {"checks": [{"id": c.id, "title": c.title, "needs": list(c.families), "why": c.why, "fix": c.fix,
                            "params": [{"name": p.name, "default": p.default, "help": p.help, "min": p.lo,
                                        "max": None if p.hi == float("inf") else p.hi} for p in c.params]}
                           for c in CATALOG]}

    @tool
    def run_checks(trace: str, only: Optional[list[str]] = None,
                   params: Optional[dict[str, float]] = None) -> dict[str, Any]:
        """Run timeline's built-in checks on a trace and return the findings as structured data,
        the same document `timeline check TRACE --format json` prints: per check its status
        (error, warning, info, ok, n/a, not recorded, failed), findings with severity, sentence,
        time window (ts/dur in trace ns, start_s from the trace start), hint and evidence numbers.
        only: check ids to run (default all; see list_checks). params: thresholds as
        {"check_id.param": value}, e.g. {"input_stall.warn_fraction": 0.2}.
        Use it to find what is wrong with a run."""
        return job("checks", trace, {"only": only, "params": params})

    @tool
    def describe_thread(trace: str, tid: Optional[int] = None, rank: Optional[int] = None,
                        start_s: Optional[float] = None, end_s: Optional[float] = None,
                        top: int = 10) -> dict[str, Any]:
        """Where one thread's time went over a window: its scheduler states (running, runnable =
        waiting for a CPU, sleeping, uninterruptible/disk wait) with time and share, and the
        slices on it (CUDA calls, ioctls, I/O, DataLoader...) with the most time. The thread:
        `tid`, or the main thread of `rank`, or by default the main training thread. The window:
        start_s/end_s in seconds from the trace's start (default: the whole trace). Use it to
        explain a finding's window or compare ranks."""
        return job("describe", trace, {"tid": tid, "rank": rank, "start_s": start_s, "end_s": end_s,
                                        "top": max(1, min(top, 100))})

    @tool
    def top_calls(trace: str, what: str, limit: int = 20, start_s: Optional[float] = None,
                  end_s: Optional[float] = None, tid: Optional[int] = None) -> dict[str, Any]:
        """The most expensive items of one kind, most time first. what: 'cuda' (CUDA runtime /
        driver / NCCL API calls on the CPU: count, total ms, median/p90/max us), 'kernels' (GPU
        kernels: the same, GPU time; needs the gpu family), or 'python' (Python functions by CPU
        samples of a thread, self and total; needs the pystack family; default thread: the main
        training thread). tid: only this thread (cuda, python). start_s/end_s: a window in seconds
        from the trace's start."""
        if what not in TOP_KINDS:
            raise ToolError(f"what must be one of {', '.join(TOP_KINDS)}, not {what!r}")
        return job("top", trace, {"what": what, "limit": max(1, min(limit, 1000)), "start_s": start_s,
                                   "end_s": end_s, "tid": tid})

    @tool
    def sql(trace: str, query: str, max_rows: int = 1000, timeout_s: float = SQL_TIMEOUT_S) -> dict[str, Any]:
        """Run read-only PerfettoSQL on a trace (trace_processor: tables slice, thread, process,
        thread_state, sched, counter, track, args, cpu_profile_stack_sample, perf_sample ...; INCLUDE PERFETTO MODULE for the
        standard library). Only queries: SELECT / WITH / VALUES / INCLUDE PERFETTO MODULE; anything
        that writes is refused. Several statements may be given; the last one's rows come back,
        at most max_rows (<= 10000; truncated says if there were more), and the query is stopped
        after timeout_s seconds (default 30). Returns {columns, rows, row_count, truncated,
        incomplete}. Use it when no other tool answers the question."""
        if len(query) > MAX_SQL_CHARS:
            raise ToolError(f"the query is longer than {MAX_SQL_CHARS:,} characters")
        try:
            check_read_only(query)
        except WritingSql as e:
            raise ToolError(f"refused: {e}") from None
        if not 1 <= max_rows <= MAX_ROWS:
            raise ToolError(f"max_rows must be between 1 and {MAX_ROWS}")
        if not 0 < timeout_s <= MAX_SQL_TIMEOUT_S:
            raise ToolError(f"timeout_s must be more than 0 and at most {MAX_SQL_TIMEOUT_S:g}")
        return job("sql", trace, {"query": query, "max_rows": max_rows}, limit_s=timeout_s)

    if _diff_available():
        @tool
        def diff_traces(baseline: str, candidate: str, options: Optional[dict[str, Any]] = None) -> dict[str, Any]:
            """Compare two traces of the same workload (e.g. yesterday's run and today's): step
            time, main-thread states, CUDA calls and kernels, and check findings side by side,
            each change with its significance, biggest impact on step time first. Use it to
            answer "why is this run slower than that one". options (all optional): checks (bool,
            default true: also diff the checks' findings), min_change and min_impact (fractions, default
            0.05: the smallest change, of the value and of the baseline's step, that may be significant),
            confidence (default 0.99, of the bootstrap intervals). Returns `timeline diff --format json`."""
            args = {"baseline": resolve(baseline), "baseline_name": baseline, "candidate": resolve(candidate),
                    "candidate_name": candidate, "options": options}
            try:
                return workers.run_alone("diff", baseline, args)
            except WorkerError as e:
                raise ToolError(str(e)) from None

    server.timeline_workers = workers  # `timeline mcp` lets the loaded traces go when it ends
    return server


def _diff_available() -> bool:
    """timeline.diff is another part of timeline: the tool appears once it is there."""
    import importlib

    try:
        return callable(getattr(importlib.import_module("timeline.diff"), "compare", None))
    except ImportError:
        return False
