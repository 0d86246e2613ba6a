"""The gpu family through `timeline record`: the recorder injects the CUPTI/NVTX
library into the launched command and stores what it sends (ring 7).

Stand-ins (no GPU here, labelled as such): the stand-in driver loads
CUDA_INJECTION64_PATH at cuInit as NVIDIA's does; a stand-in libcupti fills the
library's buffers with real-layout records (tests/standins, see
test_gpu_inject.py).  Everything from the environment variables the recorder
sets to the raw log is the real code path.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from helpers import NOBODY, REPO, SUDO_NOBODY, read_raw, require_root, timeline_cmd
from timeline.gpu import records

WORKLOAD = os.path.join(REPO, "tests", "standins", "gpu_workload.py")
STANDINS = os.path.join(REPO, "tests", "standins")


def workload_env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=STANDINS)
    for k in ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "TIMELINE_GPU_SOCKET", "TIMELINE_CUPTI_PATH"):
        env.pop(k, None)
    env.update(extra)
    return env


def record(raw: str, libs: dict, mode: str, *opts: str, n: int = 10, env=None, **kw):
    require_root()
    d = os.path.dirname(libs["libcudart.so.12"])
    return timeline_cmd("record", "--raw-only", *opts, "-o", raw, "--",
                        sys.executable, WORKLOAD, d, mode, str(n), env=env or workload_env(), **kw)


def gpu_records(log: dict) -> np.ndarray:
    parts = log.get("gpu", [])
    return np.concatenate(parts) if parts else np.zeros(0, records.GPU_RECORD)


def metas(log: dict, kind: str) -> list[dict]:
    return [m for m in log["metas"] if m.get("type") == kind]


def workload_out(cp) -> dict:
    return json.loads(cp.stdout.splitlines()[0])


@pytest.fixture(scope="module")
def basic(libs, tmp_path_factory):
    raw = str(tmp_path_factory.mktemp("gpu-rec") / "basic.tlraw")
    cp = record(raw, libs, "basic", "--gpu-sync")
    assert cp.returncode == 0, cp.stderr
    return cp, read_raw(raw), workload_out(cp)


def test_launched_command_reports_every_kind(basic):
    cp, log, out = basic
    recs = gpu_records(log)
    kinds = set(recs["kind"].tolist())
    assert {records.KERNEL, records.MEMCPY, records.MEMSET, records.API, records.NVTX, records.SYNC} <= kinds
    # the pid is the sender's as the kernel says (SO_PEERCRED), the target's
    assert set(recs["pid"].tolist()) == {out["pid"]}
    # on the clock of every other event, inside the workload's own window
    assert out["t0"] <= int(recs["start"].min()) and int(recs["end"].max()) <= out["t1"] + 10**9
    assert (recs["end"] >= recs["start"]).all()
    # the library said what it did; names come as strings
    hello = [m for m in metas(log, "gpu_hello") if m["info"].get("cuda_injection")][-1]  # NVTX may say hello first
    assert hello["pid"] == out["pid"] and hello["info"]["active"] is True
    names = {}
    for m in metas(log, "gpu_strings"):
        names.update(m["strings"])
    kernel_names = {names[str(s)] for s in recs["name"][recs["kind"] == records.KERNEL].tolist()}
    assert kernel_names and all(kernel_names)
    # the summary counts them per process
    line = [ln for ln in cp.stderr.splitlines() if f"gpu: pid {out['pid']}:" in ln]
    assert line and "kernel" in line[0] and "memcpy" in line[0], cp.stderr


def test_sync_records_only_with_gpu_sync(libs, tmp_path):
    """CUPTI's synchronization records cost the most on a real GPU: off unless asked for."""
    raw = str(tmp_path / "nosync.tlraw")
    cp = record(raw, libs, "basic")
    assert cp.returncode == 0, cp.stderr
    kinds = set(gpu_records(read_raw(raw))["kind"].tolist())
    assert {records.KERNEL, records.MEMCPY, records.API} <= kinds and records.SYNC not in kinds
    hello = [m for m in metas(read_raw(raw), "gpu_hello") if m["info"].get("cuda_injection")][-1]
    assert "synchronization" not in hello["info"]["enabled"]


def test_receiver_stats_and_no_drops(basic):
    _, log, _ = basic
    (rx,) = metas(log, "gpu_receiver")
    assert rx["stats"] == {"refused": 0, "wire_errors": 0, "cut_short": 0, "cupti_dropped": 0}
    assert sum(log["end"]["drops"]["gpu"]) == 0
    assert rx["kept_user_env"] == []


def test_records_survive_a_crash_after_a_flush(libs, tmp_path):
    raw = str(tmp_path / "crash.tlraw")
    cp = record(raw, libs, "crash", n=20)
    assert cp.returncode == 128 + signal.SIGABRT or cp.returncode == -signal.SIGABRT or cp.returncode != 0
    log = read_raw(raw)
    assert log["finalized"]
    kernels = gpu_records(log)
    kernels = kernels[kernels["kind"] == records.KERNEL]
    assert len(kernels) == 20, len(kernels)  # every launch before the periodic flush
    conv = timeline_cmd("convert", raw, "-o", str(tmp_path / "crash.pftrace"))
    assert conv.returncode == 0, conv.stderr


def test_users_own_injection_is_left_alone(libs, tmp_path):
    raw = str(tmp_path / "own.tlraw")
    env = workload_env(CUDA_INJECTION64_PATH="/nonexistent/libother.so")
    cp = record(raw, libs, "basic", env=env)
    assert cp.returncode == 0, cp.stderr
    log = read_raw(raw)
    assert not (gpu_records(log)["kind"] == records.KERNEL).any()
    (rx,) = metas(log, "gpu_receiver")
    assert rx["kept_user_env"] == ["CUDA_INJECTION64_PATH"]
    assert "CUDA_INJECTION64_PATH already set by you" in cp.stderr


def test_without_the_family_nothing_is_injected(libs, tmp_path):
    raw = str(tmp_path / "off.tlraw")
    code = ("import os, json; print(json.dumps({k: os.environ.get(k) for k in "
            "('CUDA_INJECTION64_PATH', 'NVTX_INJECTION64_PATH', 'TIMELINE_GPU_SOCKET')}))")
    require_root()
    on = timeline_cmd("record", "--raw-only", "-o", raw, "--", sys.executable, "-c", code, env=workload_env())
    off = timeline_cmd("record", "--raw-only", "-e", "sched", "-o", raw, "--", sys.executable, "-c", code,
                       env=workload_env())
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    got_on, got_off = json.loads(on.stdout.splitlines()[0]), json.loads(off.stdout.splitlines()[0])
    assert got_on["CUDA_INJECTION64_PATH"].endswith("libtimeline_inject.so")
    assert os.path.isfile(got_on["CUDA_INJECTION64_PATH"])
    assert got_on["TIMELINE_GPU_SOCKET"].startswith("timeline-gpu-")
    assert got_off == dict.fromkeys(got_off)


def test_process_outside_the_tree_is_refused(libs, tmp_path):
    """Only the recorded tree may write into the recording: a process that
    learns the socket's name (abstract sockets have no permissions) is turned
    away by its kernel-given pid."""
    require_root()
    raw = str(tmp_path / "refuse.tlraw")
    code = ("import os, sys, time; print(os.environ['TIMELINE_GPU_SOCKET'], flush=True); "
            "sys.stdin.readline()")
    p = subprocess.Popen([sys.executable, "-m", "timeline.cli", "record", "--raw-only", "-o", raw, "--",
                          sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=workload_env())
    name = p.stdout.readline().strip()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + name)
    # a well-formed RECORDS message claiming to be a kernel
    fake = np.zeros(1, records.GPU_RECORD)
    fake["kind"], fake["start"], fake["end"] = records.KERNEL, 1, 2
    try:
        s.sendall(records.encode_message(records.MSG_RECORDS, fake.tobytes()))
    except OSError:
        pass  # closed at once: refused
    s.close()
    time.sleep(0.3)
    _, err = p.communicate("\n", timeout=60)
    assert p.returncode == 0, err
    log = read_raw(raw)
    assert len(gpu_records(log)) == 0
    (rx,) = metas(log, "gpu_receiver")
    assert rx["stats"]["refused"] == 1
    assert "refused 1 connection(s) from processes outside the recording" in err


def test_target_running_as_the_invoking_user(libs, udir):
    """Under sudo the target runs as the user: it still loads the library and
    reaches the recorder."""
    d = os.path.join(udir, "standins")
    shutil.copytree(os.path.dirname(libs["libcudart.so.12"]), d)
    for root, dirs, files in os.walk(udir):
        for x in dirs + files:
            os.chown(os.path.join(root, x), NOBODY, NOBODY)
    lib = os.path.join(REPO, "timeline", "gpu", "libtimeline_inject.so")
    probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                            "test", "-r", lib], capture_output=True)
    if probe.returncode:
        pytest.skip(f"{lib} is not readable by uid {NOBODY} in this checkout (private directory)")
    raw = os.path.join(udir, "user.tlraw")
    require_root()
    # the distribution's python: a venv's may sit in a directory only root can enter
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    cp = timeline_cmd("record", "--raw-only", "-o", raw, "--", python, WORKLOAD, d, "basic", "5",
                      env=workload_env(**SUDO_NOBODY))
    assert cp.returncode == 0, cp.stderr
    log = read_raw(raw)
    recs = gpu_records(log)
    assert (recs["kind"] == records.KERNEL).any(), cp.stderr
    assert int(log["header"]["recorder_pid"]) != int(recs["pid"][0])


TWO_BATCHES = """
import os, sys, time
from ctypes import byref, c_void_p
from cuda_workload import dim3, load
rt = load(os.path.join(sys.argv[1], "libcudart.so.12"))
load(os.path.join(sys.argv[1], "libcuda.so.1"))
dev = c_void_p()
rt.cudaMalloc(byref(dev), 1 << 20)  # cuInit: the injection library starts
for batch in (1, 2):
    for _ in range(5):
        rt.cudaLaunchKernel(c_void_p(0xf00d), dim3(batch, 1, 1), dim3(32, 1, 1), None, 0, None)
    time.sleep(1.0)  # past the library's 200 ms flush
"""


def test_delay_window_applies_to_gpu_records(libs, tmp_path):
    """--delay: GPU records from before the window are left out like every other ring's."""
    require_root()
    raw = str(tmp_path / "delay.tlraw")
    d = os.path.dirname(libs["libcudart.so.12"])
    cp = timeline_cmd("record", "--raw-only", "--delay", "0.6", "-o", raw, "--", sys.executable, "-c",
                      TWO_BATCHES, d, env=workload_env())
    assert cp.returncode == 0, cp.stderr
    log = read_raw(raw)
    (cap,) = [m for m in metas(log, "capture") if "start" in m]
    recs = gpu_records(log)
    kernels = recs[recs["kind"] == records.KERNEL]
    assert (kernels["grid"][:, 0] == 2).sum() == 5, cp.stderr  # the batch inside the window, whole
    assert (recs["start"] >= cap["start"]).all()
    assert len(kernels) == 5  # the first batch ran before it (0.1-0.2 s after launch)
