"""`timeline check SET` on the local pool against Ray (a local instance):
Ray's start-up (ray.init to the first task back), a run on a warm instance,
and the local pool, over the same synthetic trace set, measured in one run.

    python bench/check_executors.py [--chunks 4]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "tests"), os.path.join(HERE, "..", "tests", "unit")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=4)
    args = ap.parse_args()
    import ray

    from test_check_traceset_merge import BOOT0, MS, TRACKS, slices
    from traceset_factory import write_set
    from timeline.checks.executors import Executor
    from timeline.checks.traceset import check_set
    from timeline.identity import invoking_user
    from timeline.trace_processor import TraceProcessorConfig

    bounds = [BOOT0 + i * 1000 * MS // args.chunks for i in range(args.chunks)] + [BOOT0 + 2000 * MS]
    config, user = TraceProcessorConfig(engine="wasm"), invoking_user()
    with tempfile.TemporaryDirectory() as d:
        tset = write_set(os.path.join(d, "set"), TRACKS, slices(), bounds)
        t0 = time.perf_counter()
        check_set(tset, config, user, workers=2)
        local = time.perf_counter() - t0
        t0 = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}})
        init = time.perf_counter() - t0
        t0 = time.perf_counter()
        check_set(tset, config, user, executor=Executor("ray"))
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        check_set(tset, config, user, executor=Executor("ray"))
        warm = time.perf_counter() - t0
        ray.shutdown()
    print(f"{args.chunks} chunks, all checks: local pool (2 workers) {local:.2f} s; ray.init {init:.2f} s, "
          f"first run {first:.2f} s (workers start), warm run {warm:.2f} s; "
          f"cold Ray / local {(init + first) / local:.1f}x, warm Ray / local {warm / local:.2f}x")


if __name__ == "__main__":
    main()
