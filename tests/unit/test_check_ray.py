"""`timeline check SET --executor ray`: the same per-chunk jobs on a Ray
instance (a local one here) give the report the local pool gives. Skipped
without Ray (the optional extra timeline[ray], not in the test extra)."""
from __future__ import annotations

import os
import signal
import sys

import pytest

from test_check_traceset_merge import BOUNDS, TRACKS, slices
from traceset_factory import write_set
from timeline.checks.executors import RAY_MISSING, Executor
from timeline.checks.report import to_json
from timeline.checks.traceset import check_set
from timeline.identity import invoking_user
from timeline.trace_processor import TraceProcessorConfig


def _same(rep: dict) -> dict:
    rep = dict(rep)
    for k in ("seconds",):
        rep.pop(k, None)
    rep["checks"] = [{k: v for k, v in c.items() if k != "seconds"} for c in rep["checks"]]
    return rep


def test_ray_runs_the_chunks_like_the_local_pool(tmp_path):
    ray = pytest.importorskip("ray")
    tset = write_set(tmp_path / "set", TRACKS, slices(), BOUNDS)
    config, ids = TraceProcessorConfig(engine="wasm"), ["cuda_errors", "cuda_graphs", "block_io", "sync_hotspots"]
    local = to_json(check_set(tset, config, invoking_user(), ids=ids, workers=2))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}  # ray.init replaces them
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}})
    try:
        remote = to_json(check_set(tset, config, invoking_user(), ids=ids, executor=Executor("ray")))
    finally:
        ray.shutdown()
        for sig, h in handlers.items():
            signal.signal(sig, h)
    assert _same(remote) == _same(local)
    assert {c["id"]: c["status"] for c in remote["checks"]}["block_io"] == "warning"


def test_without_ray_one_line_says_how_to_install(monkeypatch):
    from click.testing import CliRunner

    from timeline.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails
    res = CliRunner().invoke(main, ["check", ".", "--executor", "ray"])
    assert res.exit_code != 0 and RAY_MISSING in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["check", ".", "--address", "auto"])
    assert res.exit_code != 0 and "--address goes with --executor ray" in res.output
