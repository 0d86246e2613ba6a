"""A wheel built from the sources carries its compiled eBPF objects: installed
into a fresh venv outside the checkout, its `timeline` records real
scheduling data with nothing else from the checkout around."""
import glob
import os
import shutil
import subprocess
import sys
import zipfile

import orjson

from timeline import registry
from helpers import REPO, require_root

# Build outputs and environments stay behind: the copy builds from sources only.
IGNORE = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", "*.bpf.o", "vmlinux.h",
                                "*.so", "*.pftrace", "*.tlraw", ".pytest_cache", "tests", "bench", "sample_traces")
WORKLOAD = """
import os, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))
end = time.monotonic() + 0.3
while time.monotonic() < end:
    pass
time.sleep(0.05)
"""


def run(cmd, timeout, **kw):
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert cp.returncode == 0, f"{cmd} exited {cp.returncode}:\n{cp.stdout[-3000:]}\n{cp.stderr[-3000:]}"
    return cp


def test_wheel_installs_and_records(tmp_path):
    require_root()
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=IGNORE)
    assert not glob.glob(str(src / "timeline" / "bpf" / "*.bpf.o"))

    # Offline-friendly: the running environment's setuptools builds it.
    run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist")], timeout=300, cwd=tmp_path)
    (wheel,) = glob.glob(str(tmp_path / "dist" / "timeline-*.whl"))
    assert wheel.endswith("-py3-none-linux_x86_64.whl")  # BPF objects are per architecture
    names = set(zipfile.ZipFile(wheel).namelist())
    # a family's .bpf.c sits beside its code; every object is built into timeline/bpf
    paths = glob.glob(os.path.join(REPO, "timeline", "**", "*.bpf.c"), recursive=True)
    sources = sorted(os.path.basename(p) for p in paths)
    assert sources
    for c in sources:
        assert f"timeline/bpf/{c[:-2]}.o" in names, f"{c[:-2]}.o not in the wheel"
    for p in paths:  # the sources ship, and the record headers beside them
        assert os.path.relpath(p, REPO) in names, p
    for ring in registry.RINGS.values():
        assert f"timeline/{ring.header}" in names, ring.header
    assert "timeline/bpf/vmlinux.h" not in names  # the build machine's kernel is not needed at run time

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", wheel], timeout=400, env=env, cwd=tmp_path)
    where = run([str(venv / "bin" / "python"), "-c", "import timeline.bpf, os; print(os.path.dirname(timeline.bpf.__file__))"],
                timeout=60, env=env, cwd=tmp_path).stdout.strip()
    assert where.startswith(str(venv)), where  # the installed copy, not the checkout
    assert sorted(p for p in os.listdir(where) if p.endswith(".bpf.o")) == [c[:-2] + ".o" for c in sources]

    out, pidfile = tmp_path / "run.pftrace", tmp_path / "pid"
    timeline = str(venv / "bin" / "timeline")
    run([timeline, "record", "-q", "-e", "sched", "-o", str(out), "--", str(venv / "bin" / "python"), "-c",
         WORKLOAD, str(pidfile)], timeout=180, env=env, cwd=tmp_path)
    pid = int(pidfile.read_text())
    sql = (f"select count(*) as slices, sum(dur) as ns from sched join thread using (utid) where thread.tid = {pid}")
    rows = orjson.loads(run([timeline, "query", str(out), sql, "--format", "json", "--engine", "wasm"],
                            timeout=180, env=env, cwd=tmp_path).stdout)
    assert rows[0]["slices"] > 0 and rows[0]["ns"] > 100e6, rows  # it ran ~0.3 s on a CPU
