"""--hang-timeout (issue 15): a thread blocked forever in a stand-in ncclAllReduce
triggers a dump, and the `hang` check names the thread and the call."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from standins import build
from helpers import read_raw, require_root, timeline_cmd

# A few collectives that return (progress), then one that never does on a
# thread of its own while the main thread waits for it.
WORKLOAD = textwrap.dedent("""
    import ctypes, sys, threading, time
    from ctypes import c_int, c_size_t, c_void_p
    nccl = ctypes.CDLL(sys.argv[1])
    nccl.ncclAllReduce.argtypes = [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p]
    libc = ctypes.CDLL(None)
    for _ in range(50):
        nccl.ncclAllReduce(0x1111, 0x2222, 1000, 7, 0, 0xc0330000, 0x55)
        time.sleep(0.01)
    def collective():
        libc.prctl(15, b"allreduce-th", 0, 0, 0)
        nccl.ncclAllReduce(0x1111, 0x2222, 0x4841, 7, 0, 0xc0330000, 0x55)  # never returns
    t = threading.Thread(target=collective)
    t.start()
    print("hanging", flush=True)
    t.join()
""")


def test_hang_dump_names_thread_and_call(tmp_path):
    require_root()
    libs = build(str(tmp_path))
    out = str(tmp_path / "h.pftrace")
    p = subprocess.Popen([sys.executable, "-m", "timeline.cli", "record", "-e", "sched,cuda", "--ring", "20s",
                          "--hang-timeout", "2", "--keep-raw", "--cuda-lib", libs["libnccl.so.2"], "-o", out,
                          "--", sys.executable, "-c", WORKLOAD, libs["libnccl.so.2"]],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "hanging"
        t_hang = time.monotonic()
        dump = str(tmp_path / "h.1.pftrace")
        while not os.path.exists(dump) and time.monotonic() - t_hang < 30 and p.poll() is None:
            time.sleep(0.2)
        waited = time.monotonic() - t_hang
        assert os.path.exists(dump), "no hang dump"
        assert 1.5 < waited < 10, waited  # after the 2 s timeout, not before
        time.sleep(1)  # the conversion's last bytes
    finally:
        p.send_signal(signal.SIGTERM)  # passed on to the target
        _, err = p.communicate(timeout=120)
    assert "dump 1: wrote" in err, err
    raw = read_raw(str(tmp_path / "h.1.tlraw"))
    (hang,) = [m for m in raw["metas"] if m.get("type") == "hang"]
    stuck = [t for t in hang["threads"] if t.get("call")]
    assert [(t["name"], t["call"]) for t in stuck] == [("allreduce-th", "ncclAllReduce")]
    assert hang["ts"] - stuck[0]["since"] > 1.9e9
    cp = timeline_cmd("check", dump, "--only", "hang", "--format", "json")
    assert cp.returncode == 0, cp.stderr
    report = json.loads(cp.stdout)
    text = json.dumps(report)
    findings = [f for c in report["checks"] if c["id"] == "hang" for f in c["findings"]]
    errors = [f for f in findings if f["severity"] == "error"]
    assert len(errors) == 1, text
    assert "allreduce-th" in errors[0]["finding"] and "ncclAllReduce" in errors[0]["finding"], errors
