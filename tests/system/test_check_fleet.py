"""`timeline check DIR_OR_GLOB`: every trace checked in a process pool, one
table, a fleet summary, JSON for machines; a bad trace is reported, not fatal
to the others."""
import json
import os
import shutil
import subprocess
import sys

from helpers import REPO

SAMPLES = {name: os.path.join(REPO, "sample_traces", name) for name in ("train_cpu.pftrace", "train_gpu.pftrace")}


def check(*args):
    return subprocess.run([sys.executable, "-m", "timeline.cli", "check", *args], capture_output=True, text=True,
                          timeout=300)


def single_json(path):
    cp = check(path, "--format", "json")
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


def test_directory_as_one_table_and_fleet_json(tmp_path):
    for i, (name, path) in enumerate(sorted(SAMPLES.items()) * 2):
        shutil.copy(path, tmp_path / f"{i}_{name}")
    cp = check(str(tmp_path), "--format", "json")
    assert cp.returncode == 0, cp.stderr
    doc = json.loads(cp.stdout)
    assert doc["fleet"]["traces"] == 4 and doc["fleet"]["unreadable"] == 0
    # each report is what `timeline check TRACE` says of that trace alone
    for rep in doc["reports"]:
        alone = single_json(rep["trace"])
        assert rep["worst"] == alone["worst"] and rep["summary"] == alone["summary"]
    # the fleet summary counts traces per check, worst severity once per trace
    by = doc["fleet"]["by_check"]
    for cid, counts in by.items():
        n = sum(1 for rep in doc["reports"] for c in rep["checks"] if c["id"] == cid
                and any(f["severity"] in ("error", "warning") for f in c["findings"]))
        assert counts["error"] + counts["warning"] == n
    text = check(str(tmp_path))
    assert text.returncode == 0 and "4 traces" in text.stdout and "fleet:" in text.stdout, text.stderr


def test_glob_and_a_broken_trace(tmp_path):
    shutil.copy(SAMPLES["train_cpu.pftrace"], tmp_path / "a.pftrace")
    (tmp_path / "b.pftrace").write_bytes(b"")  # a recorder that died before writing
    (tmp_path / "c.pftrace").write_bytes(b"TLRAW\x00\x00\x00" * 8)  # a raw log under a trace's name
    cp = check(str(tmp_path / "*.pftrace"), "--format", "json")
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and "2 of 3 traces could not be checked" in cp.stderr
    doc = json.loads(cp.stdout)
    good = [r for r in doc["reports"] if "checks" in r]
    assert len(good) == 1 and good[0]["trace"].endswith("a.pftrace")
    errors = {os.path.basename(r["trace"]): r["error"] for r in doc["reports"] if "checks" not in r}
    assert "is empty" in errors["b.pftrace"] and "raw log" in errors["c.pftrace"], errors


def test_many_traces_refuse_annotate_and_empty_globs(tmp_path):
    shutil.copy(SAMPLES["train_cpu.pftrace"], tmp_path / "a.pftrace")
    cp = check(str(tmp_path), "--annotate", str(tmp_path / "out.pftrace"))
    assert cp.returncode == 2 and "--annotate takes one trace" in cp.stderr
    cp = check(str(tmp_path / "nothing*.pftrace"))
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and "no file matches" in cp.stderr
