"""`timeline doctor`: real checks on this machine, and pieces taken away."""
import os
import subprocess
import sys

import orjson

from helpers import timeline_cmd

BASE = ["kernel", "BTF", "privileges", "libbpf", "tracefs", "ring buffer", "tp_btf programs"]
FAMILIES = ["family proc", "family sched", "family cuda", "family ioctl", "family block", "family counters"]
# uid 0 without any capability: what an unprivileged user amounts to (as in test_record)
NO_CAPS = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--securebits=+noroot,+noroot_locked"]


def doctor_json(*args, env=None, prefix=()):
    cp = subprocess.run([*prefix, sys.executable, "-m", "timeline.cli", "doctor", "--format", "json", *args],
                        capture_output=True, text=True, env=env, timeout=120)
    assert not cp.stderr.strip(), cp.stderr
    doc = orjson.loads(cp.stdout)
    return cp.returncode, doc, {c["name"]: c for c in doc["checks"]}


def test_this_machine_can_record():
    rc, doc, checks = doctor_json()
    assert rc == 0 and doc["can_record"] is True
    for name in BASE + FAMILIES + ["uprobe_multi", "trace_processor wasm", "Perfetto UI (view)"]:
        assert checks[name]["status"] == "OK", checks[name]
    assert checks["kernel"]["detail"].startswith(f"Linux {os.uname().release}")
    assert checks["libbpf"]["detail"].startswith("1.")
    # the test extras put libcudart (nvidia-cuda-runtime-cu12) next to this Python
    runtime = checks["CUDA runtime"]
    assert runtime["status"] == "OK" and "env: " in runtime["detail"]
    assert "nvidia/cuda_runtime/lib/libcudart.so.12" in runtime["detail"]
    assert doc["python"] == sys.executable


def test_table_says_so():
    cp = timeline_cmd("doctor")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    for name in BASE + FAMILIES + ["CUDA runtime", "CUDA driver", "NCCL", "CUPTI", "NVML / GPUs"]:
        assert name in cp.stdout
    assert cp.stdout.rstrip().endswith("recording can work here")


def test_gpu_family_is_its_injection_library():
    """No BPF object: what the gpu family needs is the built injection library."""
    rc, _, checks = doctor_json()
    gpu = checks["family gpu"]
    assert gpu["status"] == "OK" and "libtimeline_inject.so" in gpu["detail"] and "loads and attaches" not in gpu["detail"]


def test_python_without_cuda_libraries(tmp_path):
    # A bare venv: no nvidia-* wheels, no torch. CUDA is optional: still exit 0.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    bare = str(tmp_path / "bare" / "bin" / "python")
    rc, doc, checks = doctor_json("--python", bare)
    assert rc == 0 and doc["python"] == bare
    runtime = checks["CUDA runtime"]
    assert "env: " not in runtime["detail"] and "cuda_runtime" not in runtime["detail"]
    if runtime["status"] != "OK":  # nothing in ldconfig's cache either: the fix names the package
        assert "nvidia-cuda-runtime-cu12" in runtime["fix"] and "--python" in runtime["fix"]


def test_without_privileges_nothing_loads():
    rc, doc, checks = doctor_json(prefix=NO_CAPS)
    assert rc == 1 and doc["can_record"] is False
    assert checks["privileges"]["status"] == "MISSING" and "sudo" in checks["privileges"]["fix"]
    assert checks["kernel"]["status"] == "OK" and checks["BTF"]["status"] == "OK"
    for name in ["ring buffer", "family proc", "family sched"]:
        assert checks[name]["status"] == "MISSING" and "needs root" in checks[name]["detail"]
    cp = subprocess.run([*NO_CAPS, sys.executable, "-m", "timeline.cli", "doctor"], capture_output=True, text=True)
    assert cp.returncode == 1 and "recording cannot work here" in cp.stdout


def test_missing_bpf_objects(tmp_path):
    env = dict(os.environ, TIMELINE_BPF_DIR=str(tmp_path))  # no *.bpf.o there
    rc, doc, checks = doctor_json(env=env)
    assert rc == 1 and doc["can_record"] is False
    for name in FAMILIES:
        assert checks[name]["status"] in ("MISSING", "missing") and "not found" in checks[name]["detail"]
        assert "python -m timeline.bpf.build" in checks[name]["fix"]
    assert checks["family proc"]["required"] and not checks["family block"]["required"]
    # record fails on the same machine problem with one line pointing to doctor
    cp = subprocess.run([sys.executable, "-m", "timeline.cli", "record", "-o", str(tmp_path / "x.pftrace"), "--",
                         "true"], capture_output=True, text=True, env=env)
    assert cp.returncode == 2
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("timeline: error: loading the eBPF programs failed")
    assert lines[0].endswith("run `timeline doctor`")


def test_bad_python_is_one_line(tmp_path):
    cp = timeline_cmd("doctor", "--python", str(tmp_path / "nope"))
    assert cp.returncode == 2 and cp.stderr.strip().splitlines() == [
        f"timeline: error: --python {tmp_path / 'nope'}: not an executable file"]
