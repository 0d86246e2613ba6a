"""The check catalog: metadata for every check; the logic is in sql/<id>.sql.

Each SQL file may hold several statements (helper tables named _tl_<id>_*);
its last statement returns the findings, one row each, with the columns
    severity  'error' | 'warning' | 'info' | 'ok' | 'n/a'
    finding   one sentence with the numbers
    ts, dur   the time window it refers to (trace ns; NULL when global)
    hint      optional: a fix specific to what was found (else `fix` below)
and any other column is evidence (name -> number/text) shown next to it.
`${name}` in the SQL is replaced by the check's threshold parameter `name`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..family import CheckData
from ..registry import CHECK_DATA

SQL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sql")

# Most windows one windowed check cuts a time span into (${window_cap} in
# _prelude.sql): past it the windows widen, so a check's work is bounded by
# this count, not by how long the trace says it is (a crafted one can claim
# decades).
WINDOW_CAP = 100_000

# The data a check may need (Check.families names it): what every recording
# has, then what the families' converters provide (Family.check_data).
CORE_DATA: tuple[CheckData, ...] = (
    CheckData("sched", "exists(select 1 from sched)", "scheduling data (sched_switch / sched_waking)"),
    CheckData("drops", "exists(select 1 from stats where name in ('ftrace_cpu_overrun_end', "
                       "'ftrace_cpu_dropped_events_delta') and idx is not null) "
                       "or exists(select 1 from counter_track where name glob 'timeline: * records dropped')",
              "drop counters (ftrace_cpu_* stats, 'timeline: * records dropped' counters; a Chrome JSON "
              "trace keeps its drops in metadata.timeline, which trace_processor does not load)"),
)


@dataclass(frozen=True)
class Param:
    name: str
    default: float
    help: str
    lo: float = 0.0             # valid values: lo <= v <= hi (--param is checked against them)
    hi: float = float("inf")


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    families: tuple[str, ...]  # the check runs when any of these is in the trace
    why: str
    fix: str
    params: tuple[Param, ...] = field(default_factory=tuple)

    @property
    def sql_path(self) -> str:
        return os.path.join(SQL_DIR, f"{self.id}.sql")

    def sql(self) -> str:
        with open(self.sql_path, encoding="utf-8") as f:
            return f.read()

    def defaults(self) -> dict[str, float]:
        return {p.name: p.default for p in self.params}


P = Param
CATALOG: tuple[Check, ...] = (
    Check(
        "dropped_events", "Dropped events", ("drops",),
        why="Events the kernel could not queue are missing from the trace: every other check sees "
            "less than what happened (gaps in thread states, missing switches).",
        fix="Record again with a larger --buffer-size (MiB, power of two) or a shorter --flush-interval; "
            "losses the recorder reports as refused by the kernel with room left (summary, 'records refused' "
            "track) are not helped by a bigger buffer, nor are the gpu family's (CUPTI's own buffers filled in "
            "the traced process, or the injection library's messages were cut short).",
        params=(P("error_fraction", 0.01, "dropped / (recorded + dropped) from which the finding is an "
                                          "error (any drop is at least a warning)", hi=1),)),
    Check(
        "input_stall", "Input pipeline stall", ("sched",),
        why="While the main training thread sleeps waiting for the next batch from the DataLoader "
            "workers, the model (and the GPU) does nothing.",
        fix="Make batches cheaper or produce them in parallel: more num_workers, a larger prefetch_factor, "
            "persistent_workers=True, faster storage or caching, lighter per-sample transforms.",
        params=(P("warn_fraction", 0.10, "share of the DataLoader's run the main thread spent waiting for "
                                         "batches: warning from here", hi=1),
                P("error_fraction", 0.30, "... error from here", hi=1),
                P("window_s", 1.0, "window length for the worst windows", lo=0.01),
                P("max_windows", 3, "how many worst windows to list"))),
    Check(
        "cpu_contention", "CPU contention on the dispatcher thread", ("sched",),
        why="The thread that runs the training loop (and launches GPU work) must get a CPU the moment "
            "it is runnable; time spent runnable-but-not-running delays every step.",
        fix="Give the dispatcher thread a CPU of its own: fewer DataLoader workers / OMP threads than "
            "cores, pin noisy processes elsewhere (taskset), or raise its priority.",
        params=(P("warn_fraction", 0.10, "waiting / (waiting + running) time of the dispatcher: warning", hi=1),
                P("error_fraction", 0.30, "... error", hi=1),
                P("min_wait_us", 200, "runnable intervals shorter than this are wakeup latency, not "
                                      "contention, and do not count as waiting"),
                P("min_wall_fraction", 0.01, "... and waiting must be at least this share of the thread's "
                                             "wall time (a thread that hardly runs loses nothing)", hi=1),
                P("p99_latency_ms", 5.0, "p99 scheduling latency (runnable -> running) for a warning"),
                P("storm_switches_per_s", 5000, "context switches per second of the dispatcher for a "
                                                "'switch storm' warning"),
                P("window_s", 1.0, "window length for the worst window", lo=0.01))),
    Check(
        "launch_latency", "Kernel launch latency outliers", ("cuda",),
        why="A kernel launch normally costs a few microseconds of CPU; launches far above the median "
            "stall the dispatcher and starve the GPU.",
        fix="Look at the thread state during the slow launches: runnable means CPU contention (see "
            "cpu_contention), sleeping means the driver blocked (launch queue full, lock, page faults).",
        params=(P("outlier_factor", 10, "a launch is an outlier above this multiple of its function's median"),
                P("min_outlier_us", 100, "... and above this many microseconds"),
                P("p99_error_factor", 20, "error when the p99 is this multiple of the median"),
                P("max_outliers", 3, "how many worst outliers to list"))),
    Check(
        "sync_hotspots", "Synchronization hot spots", ("cuda",),
        why="Stream/device/event synchronizations and blocking device-to-host copies (.item(), .cpu(), "
            "printing a tensor) make the CPU wait for the GPU and drain its work queue.",
        fix="Remove syncs from the step: keep metrics on the GPU and read them every N steps, use "
            "non_blocking=True copies into pinned memory, avoid .item()/.tolist() in the loop.",
        params=(P("warn_fraction", 0.10, "share of a thread's CUDA span spent in sync calls: warning", hi=1),
                P("error_fraction", 0.30, "... error", hi=1),
                P("small_copy_bytes", 64, "D2H copies up to this size count as scalar reads (.item())"))),
    Check(
        "python_hotspots", "Python CPU hot spots on the main thread", ("pystack",),
        why="The Python functions that keep the main training thread busy on the CPU are the ones that "
            "delay every step (and leave the GPU waiting when the step is host-bound).",
        fix="Look at the hottest lines: move per-step Python work (data reshaping, logging, metric "
            "bookkeeping) off the main thread, vectorize it, or compile it (torch.compile, CUDA graphs).",
        params=(P("top", 5, "how many functions to list (by self samples)", lo=1),)),
    Check(
        "host_gpu_gaps", "Host-bound GPU gaps", ("cuda", "gpu_counters"),
        why="GPU idle time while the thread feeding it is busy on the CPU means the GPU waits for Python. "
            "With GPU activity recorded this is each GPU's real idle time; without it, long gaps between "
            "GPU submissions and low NVML utilization windows stand in.",
        fix="Cut per-step Python overhead: CUDA graphs / torch.compile, larger batches, fused "
            "optimizers, move host-side work (logging, data prep) off the dispatcher thread.",
        params=(P("min_gap_ms", 5, "a gap between submissions counts from this length"),
                P("min_idle_us", 200, "with GPU activity recorded: an idle stretch of a GPU counts from this "
                                      "length"),
                P("active_fraction", 0.5, "... when the submitting thread was running/runnable for this "
                                          "share of it", hi=1),
                P("warn_fraction", 0.10, "gap time / submission span: warning", hi=1),
                P("error_fraction", 0.30, "... error", hi=1),
                P("low_util_pct", 30, "GPU utilization below this is 'low'", hi=100),
                P("util_warn_fraction", 0.25, "share of low-utilization time for a warning", hi=1))),
    Check(
        "alloc_churn", "Allocator churn and OOM", ("cuda",),
        why="PyTorch's caching allocator should make cudaMalloc/cudaFree rare; a steady stream of them "
            "(each may synchronize the device) or out-of-memory returns cost time or the run.",
        fix="Avoid torch.cuda.empty_cache() in the loop, keep shapes stable, set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation; for OOM reduce the "
            "batch or use activation checkpointing.",
        params=(P("free_rate_warn_per_s", 20, "cudaFree/cuMemFree calls per second of the process' CUDA span "
                                              "for a warning (the caching allocator frees only on "
                                              "empty_cache() or after a failed allocation)"),
                P("time_warn_fraction", 0.05, "share of the process' CUDA span inside them for a warning", hi=1))),
    Check(
        "cuda_errors", "CUDA errors", ("cuda",),
        why="A CUDA call that returns an error usually means a crash, a silent fallback or a retry loop.",
        fix="Read the error name; 2 = out of memory, 35 = driver older than the runtime, 100 = no device, "
            "700 = illegal address (run with CUDA_LAUNCH_BLOCKING=1 to find the kernel).",
        params=()),
    Check(
        "cuda_graphs", "CUDA graph re-capture storms", ("cuda",),
        why="Capturing and instantiating a CUDA graph costs milliseconds; it pays off only when the "
            "graph is replayed many times. Re-capturing every step, or never launching, is pure overhead.",
        fix="Keep shapes static (pad/bucket), mark dynamic dims, and check torch.compile recompilation "
            "logs (TORCH_LOGS=recompiles).",
        params=(P("min_instantiations", 10, "instantiations before a re-capture storm is reported"),
                P("min_replays", 5, "launches per instantiated graph below which it is a storm"))),
    Check(
        "block_io", "Block I/O stalls", ("block_io",),
        why="Slow disk requests block whoever waits for them (DataLoader workers reading samples, "
            "checkpoint writes) in uninterruptible sleep.",
        fix="Cache the dataset in RAM or on local NVMe, read larger contiguous chunks, use more "
            "workers to overlap I/O, or write checkpoints asynchronously.",
        params=(P("p99_warn_ms", 50, "per-device p99 request latency for a warning"),
                P("p99_error_ms", 500, "... for an error"))),
    Check(
        "memory_pressure", "Memory-pressure stalls and OOM kills", ("memory",),
        why="A thread that must reclaim or compact memory before its allocation succeeds stalls in the kernel "
            "(a late step, a slow DataLoader batch); an OOM kill ends a process, often a DataLoader worker, "
            "that otherwise just vanishes.",
        fix="Give the job more memory headroom (or a higher cgroup limit), or use less: fewer DataLoader workers, "
            "a smaller prefetch_factor, pinned memory only where needed, no page-cache-heavy reads.",
        params=(P("warn_ms", 100, "stall time on one thread (per kind) for a warning"),
                P("error_ms", 1000, "... for an error"))),
    Check(
        "cgroup_limits", "Container limits (cgroup throttling, memory limits)", ("cgroup",),
        why="A container's CPU quota stops all its threads once used up in a period (every rank's step waits), "
            "and going over memory.high or the memory limit makes its tasks reclaim and stall, or be killed.",
        fix="Match the job to its container: threads to the CPU quota, memory to the limit; or raise the limits.",
        params=(P("warn_pct", 10, "share of CFS periods throttled for a warning (%)", hi=100),
                P("error_pct", 50, "... for an error (%)", hi=100))),
    Check(
        "slow_ioctls", "Slow GPU-driver ioctls", ("ioctl",),
        why="The GPU driver does memory mapping, context and channel work in ioctls; slow ones block "
            "the calling thread (often the dispatcher) in the kernel.",
        fix="Look at which request is slow: allocation/mapping ioctls point at allocator churn, "
            "repeated context setup at process/thread churn; keep them out of the steady state.",
        params=(P("slow_ms", 50, "an ioctl is slow from this duration (warning)"),
                P("error_ms", 1000, "... error from this duration"))),
    Check(
        "gpu_breakdown", "GPU time breakdown", ("gpu",),
        why="Where each GPU's time goes (compute, communication not hidden by compute, copies, idle) says "
            "what bounds the run before any detail does.",
        fix="Idle GPU time is won back on the host (host_gpu_gaps, gpu_queue_delay, input_stall); exposed "
            "communication through overlap (comm_overlap); copy time through pinned memory and fewer transfers.",
        params=(P("idle_warn_fraction", 0.30, "idle share of the steady state for a warning", hi=1),)),
    Check(
        "gpu_queue_delay", "Launch-to-start queueing", ("gpu",),
        why="The delay from a launch call to its kernel's start tells who waits: near zero, the GPU runs "
            "whatever the host just sent and waits for more (host-bound); long, the host runs ahead.",
        fix="A host-bound GPU needs fewer, larger kernels (fusion, torch.compile), CUDA graphs and less "
            "Python per step; check cpu_contention and input_stall.",
        params=(P("starve_us", 50, "median launch-to-start delay below which the launch queue is empty"),
                P("idle_warn_fraction", 0.20, "... and the GPU idle at least this share of the steady state: "
                                              "warning", hi=1))),
    Check(
        "kernel_outliers", "GPU kernel duration outliers", ("gpu",),
        why="A kernel that sometimes runs many times longer than usual points at GPU contention (other "
            "streams or processes), clock throttling or data-dependent work.",
        fix="Look at what else ran on the GPU then (other streams, NCCL), the GPU clock and power counters, "
            "and the kernel's inputs at those steps.",
        params=(P("outlier_factor", 5, "a run is an outlier above this multiple of the kernel's median", lo=1),
                P("min_outlier_us", 100, "... and above this many microseconds"),
                P("min_runs", 10, "only kernels run at least this often have a median", lo=1),
                P("max_outliers", 3, "how many worst runs to list"))),
    Check(
        "comm_overlap", "Compute/communication overlap", ("gpu",),
        why="Communication kernels (NCCL) that run while no compute kernel does leave the GPU's compute "
            "idle; data-parallel training hides them behind the backward pass.",
        fix="Overlap the all-reduce with backward (DDP buckets, FSDP prefetch) or communicate less per step.",
        params=(P("min_comm_fraction", 0.05, "communication share of the steady state worth judging", hi=1),
                P("overlap_warn_fraction", 0.5, "overlapped share of communication below which it warns", hi=1))),
    Check(
        "rank_straggler", "Straggler rank", ("sched",),
        why="In data-parallel training every collective waits for the last rank to arrive: one slow rank "
            "(more data, a busier host, a slower disk or device) sets the pace of all of them.",
        fix="Look at what the named rank does while the others wait (its thread states, CUDA calls, DataLoader): "
            "balance the data or sequence lengths, move it off a busy or throttled host, fix its input pipeline.",
        params=(P("min_wait_ms", 1.0, "a main thread's sleep (S or D) at least this long counts as a wait", lo=0.01),
                P("min_rounds", 5, "waits blamed on one rank before it is named", lo=1),
                P("share_warn", 0.7, "share of the other ranks' waiting time spent on one rank: warning from here",
                  hi=1),
                P("rounds_warn", 0.6, "share of the other ranks' waits (or of the NCCL rounds) in which one rank was "
                                      "the last: warning from here", hi=1),
                P("net_rtt_ms", 20.0, "with the net family: a wait no computing rank explains is on the network when "
                                      "the waiter's connections retransmit or show an RTT this high", lo=0.01),
                P("net_share_warn", 0.3, "share of all the ranks' waiting time on the network: warning from here",
                  hi=1))),
    Check(
        "rank_imbalance", "Rank imbalance", ("sched",),
        why="Ranks that do the same work per step should be equally busy; a spread means some ranks idle "
            "at every collective while others compute.",
        fix="Even out the work per rank (data sharding, sequence-length bucketing, pipeline stage balance) or find "
            "why one host is slower (rank_straggler names the rank, cpu_contention what competes with it).",
        params=(P("spread_warn", 0.2, "(most - least running time) / most, of the ranks' main threads: warning "
                                       "from here", hi=1),)),
    Check(
        "net_retransmits", "TCP retransmits in waits", ("net",),
        why="A lost segment stalls its TCP connection for a fast retransmit or, worse, a retransmission timeout "
            "(200 ms and up); a collective or a DataLoader fetching over that connection waits just as long.",
        fix="Look at the named connection's path: a congested or lossy link, a NIC dropping under load, a full "
            "receive buffer on the peer; compare its srtt and retransmits with the other ranks' connections.",
        params=(P("min_retransmits", 3, "retransmits after a loss inside waits before a warning", lo=1),)),
    Check(
        "net_throughput", "Slow connections", ("net",),
        why="In a collective every rank waits for the slowest link; a connection moving data much slower than "
            "the others of the job points at a slow path, not at the computation.",
        fix="Check the slow connection's route and NIC (speed, errors, MTU), whether it shares a link with other "
            "traffic, and its retransmits (net_retransmits) and windows (snd_wnd, rcv_wnd counters).",
        params=(P("slow_fraction", 0.5, "a connection below this share of the best one's rate: warning", hi=1),
                P("min_mib", 1.0, "connections that moved less (MiB) are left out"))),
    Check(
        "hang", "Threads stuck at the end of the trace", ("cuda", "sched"),
        why="A job that hangs (a collective whose peer died, a deadlock, a stuck read) shows at the end of "
            "its trace as threads blocked in one call or one wait; a --hang-timeout dump ends right there.",
        fix="Look at the call each thread is stuck in: an NCCL collective on some ranks only means a rank "
            "died or diverged (compare ranks' dumps); a sleep or D state points at a lock, a queue or I/O.",
        params=(P("min_stuck_s", 1.0, "a call or wait open at the end counts from this many seconds"),)),
)

BY_ID = {c.id: c for c in CATALOG}


def _data_in_catalog_order() -> tuple[CheckData, ...]:
    """Core data first, then the families' in the order the catalog first needs
    them (how reports list what a trace holds), then any no check needs yet."""
    first_use = list(dict.fromkeys(name for c in CATALOG for name in c.families))
    rank = {name: i for i, name in enumerate(first_use)}
    return CORE_DATA + tuple(sorted(CHECK_DATA, key=lambda d: rank.get(d.name, len(rank))))


DATA: tuple[CheckData, ...] = _data_in_catalog_order()
FAMILY_HELP = {d.name: d.help for d in DATA}  # data name -> what it is
