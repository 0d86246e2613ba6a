"""Where the per-trace / per-chunk check jobs run: the local process pool
(fleet.run_pool, the default) or a Ray cluster (`--executor ray --address
ADDR`, the optional extra timeline[ray]). A job is a picklable tuple and its
function returns plain JSON-able data, so either runs the same jobs.

On a cluster every worker node must see the trace paths (a shared file
system): a job names a path, not the bytes."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from ..errors import UserError

EXECUTORS = ("local", "ray")
RAY_MISSING = "--executor ray needs Ray: pip install 'timeline[ray]' (or pip install ray)"


@dataclass(frozen=True)
class Executor:
    kind: str = "local"
    address: Optional[str] = None  # ray: a cluster's address ('auto', 'ray://host:10001'); None: a local instance


LOCAL = Executor()


def run_jobs(fn: Callable, jobs: list, workers: Optional[int] = None, executor: Executor = LOCAL) -> list:
    """fn(job) for every job, results in order."""
    if executor.kind == "ray":
        return run_ray(fn, jobs, executor.address)
    from .fleet import run_pool

    return run_pool(fn, jobs, workers)


def require_ray():
    try:
        import ray
    except ImportError:
        raise UserError(RAY_MISSING) from None
    return ray


def run_ray(fn: Callable, jobs: list, address: Optional[str]) -> list:
    """fn(job) for every job as Ray tasks (one CPU each). Connects to the
    cluster at `address`, or starts a local instance without one; a Ray
    already initialised in this process (a test's ray.init()) is used as is."""
    ray = require_ray()
    started = False
    if not ray.is_initialized():
        try:
            ray.init(address=address, log_to_driver=False, include_dashboard=False,
                     runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise UserError(f"cannot connect to the Ray cluster at {address or 'a new local instance'}: "
                            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        started = True
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(fn)
        return ray.get([task.remote(j) for j in jobs])
    finally:
        if started:
            ray.shutdown()
