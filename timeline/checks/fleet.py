"""`timeline check DIR_OR_GLOB`: the checks on many traces at once, in a
process pool (one trace_processor per worker, as Perfetto's
BatchTraceProcessor does), then a per-trace table and a fleet summary."""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor

SEVERITY_ORDER = ("error", "warning", "info", "ok")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies, however it
    dies (SIGKILL included): a worker holds a GiB-sized engine and must not
    live on as an orphan."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the parent's own clean-up is all there is
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def _worker_init(parent_pid: int) -> None:
    """Each worker ignores Ctrl-C (the parent kills the pool on it: a
    KeyboardInterrupt raised inside the engine's host functions corrupts it)
    and dies with the parent. It was forked with SIGINT blocked, so no
    Ctrl-C can land before this runs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    die_with_parent(parent_pid)


def _one(job) -> dict:
    """Worker: checks on one trace -> its JSON report, or {"trace", "error"}."""
    path, tp_config, user, ids, params = job
    from ..errors import UserError
    from ..trace_file import open_loadable

    try:  # opened once, as the invoking user; empty, a raw log, a cut gzip: said as for one trace
        fd = open_loadable(path, user)
    except UserError as e:
        return {"trace": path, "error": str(e)}
    try:
        return _check_loaded(path, fd, tp_config, ids, params)
    finally:
        os.close(fd)


def _check_loaded(path: str, fd: int, tp_config, ids, params) -> dict:
    """The checks on the trace open on `fd`, loaded by tp_config's engine."""
    from dataclasses import replace

    from ..trace_processor import TraceProcessorError
    from .report import to_json
    from .runner import check_trace

    class LoadFailed(Exception):
        pass

    def load(memory64):
        config = tp_config if memory64 is None else replace(tp_config, engine="wasm", wasm_memory64=memory64)
        try:
            return config.load(path, fd=fd)
        except Exception as e:  # noqa: BLE001 - one bad trace must not stop the fleet
            raise LoadFailed(str(e).splitlines()[0] if str(e) else type(e).__name__) from None

    try:
        return to_json(check_trace(load, path, only=ids, params=params))
    except LoadFailed as e:
        return {"trace": path, "error": f"cannot load: {e}"}
    except TraceProcessorError as e:
        from .completeness import fd_problem

        cut = fd_problem(fd)
        return {"trace": path, "error": f"checks failed: {str(e).splitlines()[0]}" + (f"; {cut}" if cut else "")}


def run_fleet(paths: list[str], tp_config, user, ids, params, workers: int | None = None,
              executor=None) -> list[dict]:
    """Every trace's report (or error), checked in a pool of forked workers
    (or on the executors.Executor given). tp_config:
    trace_processor.TraceProcessorConfig; user: identity.InvokingUser, whom the
    traces are opened as."""
    from .executors import LOCAL, run_jobs

    return run_jobs(_one, [(p, tp_config, user, ids, params) for p in paths], workers, executor or LOCAL)


def run_pool(fn, jobs: list, workers: int | None = None) -> list:
    """fn(job) for every job, in order, in a pool of forked workers (one
    engine each) that die with us and leave Ctrl-C to us."""
    workers = max(1, min(len(jobs), workers or os.cpu_count() or 1))
    if workers == 1:
        return [fn(j) for j in jobs]
    # fork: the workers are our children (PR_SET_PDEATHSIG is about the parent),
    # and they start without a second import of everything
    ctx = multiprocessing.get_context("fork")
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                               initargs=(os.getpid(),))
    try:
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            results = pool.map(fn, jobs)  # forks every worker now
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        out = list(results)
    except BaseException:
        # Ctrl-C (or anything else): stop now, not after the jobs in flight
        for proc in set(multiprocessing.active_children()) - before:
            proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return out


def headline(rep: dict) -> str:
    """The worst finding of a report, in a few words."""
    for sev in ("error", "warning"):
        for c in rep.get("checks", []):
            for f in c["findings"]:
                if f["severity"] == sev:
                    return f"{c['id']}: {f['finding'][:90]}"
    return ""


def fleet_summary(reports: list[dict]) -> dict:
    """Per check: how many traces have an error / a warning from it."""
    out: dict[str, dict[str, int]] = {}
    for rep in reports:
        for c in rep.get("checks", []):
            sevs = {f["severity"] for f in c["findings"]}
            for sev in ("error", "warning"):
                if sev in sevs:
                    out.setdefault(c["id"], {"error": 0, "warning": 0})[sev] += 1
                    break
    return {"traces": len(reports), "unreadable": sum(1 for r in reports if "error" in r and "checks" not in r),
            "incomplete": sum(1 for r in reports if r.get("complete") is False),
            "by_check": dict(sorted(out.items(), key=lambda kv: (-kv[1]["error"], -kv[1]["warning"], kv[0])))}
