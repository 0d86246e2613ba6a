"""Rank fields of a real torchrun job in the recording and the trace. Parsing:
tests/unit/test_ranks.py.
"""
import os
import sys

import pytest


TRAIN = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
assert t[0].item() == dist.get_world_size()
dist.destroy_process_group()
"""


def test_torchrun_ranks_recorded(tmp_path):
    """A real torchrun (gloo, CPU, 2 ranks): each worker's rank reaches the raw
    log, and the Chrome JSON names its process `rank N · ...`, sorted by rank."""
    import json
    from helpers import read_raw, require_root, timeline_cmd
    require_root()
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")  # the venv's, not PATH's
    if not os.path.exists(torchrun):
        pytest.fail(f"torchrun not installed next to {sys.executable}")
    out = tmp_path / "run.json"
    r = timeline_cmd("record", "-e", "sched", "--keep-raw", "-o", str(out), "--", torchrun,
                     "--nproc-per-node", "2", "--master-port", "29531", str(script), timeout=300)
    assert r.returncode == 0, r.stderr
    raw = read_raw(str(tmp_path / "run.tlraw"))
    ranked = [p for m in raw["metas"] if m.get("type") == "ranks" for p in m["processes"]]
    by_rank = {p["rank"]: p for p in ranked}
    assert set(by_rank) == {0, 1}, ranked
    assert all(p["world_size"] == 2 and p["local_rank"] == p["rank"] for p in by_rank.values())
    evs = json.loads(out.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in evs if e.get("ph") == "M" and e["name"] == "process_name"}
    for rank, p in by_rank.items():
        assert names[p["pid"]].startswith(f"rank {rank} \u00b7 "), names[p["pid"]]
        assert "train.py" in names[p["pid"]]
    sort = {e["pid"]: e["args"]["sort_index"] for e in evs if e.get("name") == "process_sort_index"}
    # the recorded tree is ordered depth first; torchrun's workers among themselves by rank
    assert sort[by_rank[0]["pid"]] < sort[by_rank[1]["pid"]], sort


def test_perfetto_rank_args(tmp_path):
    """Perfetto output: each ranked process carries its ranks as process args."""
    from helpers import require_root, timeline_cmd
    from timeline.trace_processor import open_trace
    require_root()
    out = tmp_path / "r.pftrace"
    r = timeline_cmd("record", "-e", "sched", "-o", str(out), "--", "sh", "-c",
                     "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 sleep 0.3 & RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 sleep 0.3; wait")
    assert r.returncode == 0, r.stderr
    with open_trace(str(out)) as tp:
        rows = tp.query("select p.pid, p.name, a.string_value from process p join args a using(arg_set_id) "
                        "where a.key glob 'chrome.process_label*' order by p.pid, a.id").rows
    labels: dict = {}
    for pid, name, label in rows:
        assert name == "sleep"  # the cmdline's name stays
        labels.setdefault(pid, []).append(label)
    assert sorted(labels.values()) == [["rank=0", "local_rank=0", "world_size=2"],
                                       ["rank=1", "local_rank=1", "world_size=2"]]
