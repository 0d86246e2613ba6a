"""The gpu family's socket against a hostile target in a real recording (issue 20).
The receiver in-process: tests/unit/test_gpu_socket_bounds.py.
"""
from __future__ import annotations

import json
import os
import sys

from helpers import read_raw, require_root, timeline_cmd


HOSTILE_TARGET = r"""
import json, os, socket, struct
name = os.environ["TIMELINE_GPU_SOCKET"]
def msg(t, payload):
    return struct.pack("<II", t, len(payload)) + payload
def send(data):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + name)
    try:
        s.sendall(data)
    except OSError:
        pass
    return s
keep = [
    send(msg(1, json.dumps({"pid": 2**64, "cuda_injection": True, "active": False,
                            "reason": "R" * 60000}).encode())
         + msg(4, b'{"cupti_dropped": 18446744073709551616}')),
    send(msg(1, b'{"reason": "' + b"x" * (4 << 20) + b'"}')),
]
for s in keep:
    s.shutdown(socket.SHUT_WR)
    s.recv(1)  # the receiver has read everything (EOF or reset back): the messages are in
print("sent", flush=True)
"""


def test_hostile_target_in_a_real_recording(tmp_path):
    """The reproduced findings (a u64-overflowing count in HELLO and STATUS, a 4 MB HELLO, a long reason) from
    a target of `timeline record`: the recording finishes, the trace is written, the summary is short."""
    require_root()
    trace = str(tmp_path / "h.json")
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH")}
    cp = timeline_cmd("record", "-e", "sched,gpu", "--keep-raw", "-o", trace, "--",
                      sys.executable, "-c", HOSTILE_TARGET, env=env, timeout=90)
    assert cp.returncode == 0, cp.stderr
    assert "sent" in cp.stdout and "Traceback" not in cp.stderr, cp.stderr
    with open(trace) as f:
        json.load(f)
    (raw,) = [p for p in os.listdir(tmp_path) if p.endswith(".tlraw")]
    log = read_raw(str(tmp_path / raw))
    assert log["end"] is not None
    assert all(n < 2 ** 63 for n in log["end"]["drops"].get("gpu", []))
    (meta,) = [m for m in log["metas"] if m.get("type") == "gpu_receiver"]
    assert meta["stats"]["wire_errors"] == 1 and meta["bounds"]["fields_left_out"] == 2
    gpu_lines = [ln for ln in cp.stderr.splitlines() if "gpu:" in ln]
    assert gpu_lines and all(len(ln) < 400 for ln in gpu_lines), cp.stderr[-2000:]
    assert sum("receiver's bounds" in ln for ln in gpu_lines) == 1
