"""net_throughput on real connections: two socket jobs (tests/system/net_job.py)
across two network namespaces, one after the other, on two ports; nftables in
rank 0's namespace drops what arrives on one port above 4 MB/s.  That connection's
direction into rank 0 is named slow; the other connection is not, and the
same two jobs without the limit give no warning at all."""
import json
import shutil
import subprocess
import sys

import pytest

from helpers import timeline_cmd
import test_net
from test_net import ADDR0, JOB

FAST, SLOW = 29610, 29611
namespaces = test_net.namespaces  # a module fixture: the veth pair
LIMIT = """table inet tl_slow {
  chain input { type filter hook input priority 0; tcp dport %d limit rate over 4 mbytes/second drop; }
}
""" % SLOW


def _record(tmp, ns, name, *, limited):
    a, b = ns
    if limited:
        if not shutil.which("nft"):
            pytest.skip("needs nftables to limit a port: scripts/setup.sh installs it")
        r = subprocess.run(["ip", "netns", "exec", a, "nft", "-f", "-"], input=LIMIT, capture_output=True, text=True)
        if r.returncode and "not supported" in r.stderr.lower():
            pytest.skip(f"the kernel cannot filter packets with nftables: {r.stderr.strip()}")
        assert r.returncode == 0, r.stderr
    try:
        path = str(tmp / f"{name}.pftrace")
        # one job after the other, each with the machine to itself; 4 x 32 MiB each way: the check
        # counts a connection's active time in 10 ms buckets, so a transfer over in 2-4 of them
        # reads up to 2x slower than it was; the limited one moves 4 x 4 MiB (4 s at 4 MB/s)
        mib = {FAST: 32, SLOW: 4 if limited else 32}
        jobs = "; ".join(f"{sys.executable} {JOB} launch {a} {b} {ADDR0} {port} 4 {mib[port]} socket"
                         for port in (FAST, SLOW))
        # the free run at real-time priority: veth moves bytes on the sender's CPU time, so other
        # work on a shared machine could halve one job's rate and not the other's (CI saw 47%);
        # the limited run needs no such care (4 MB/s against hundreds)
        rt = [] if limited else ["chrt", "-f", "10"]
        cp = timeline_cmd("record", "-e", "sched,net", "-o", path, "--", *rt, "sh", "-ec", jobs, timeout=300)
        assert cp.returncode == 0, cp.stderr[-3000:]
        out = timeline_cmd("check", "--only", "net_throughput", "--format", "json", path)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["checks"][0]["findings"]
    finally:
        if limited:
            subprocess.run(["ip", "netns", "exec", a, "nft", "delete", "table", "inet", "tl_slow"], capture_output=True)


def _port(finding):
    conn = finding["evidence"]["conn"] if "evidence" in finding else finding["finding"]
    return SLOW if f":{SLOW}" in conn else FAST if f":{FAST}" in conn else None


def test_the_limited_connection_is_named_slow(namespaces, tmp_path):
    found = _record(tmp_path, namespaces, "limited", limited=True)
    warned = [f for f in found if f["severity"] == "warning"]
    assert warned and {_port(f) for f in warned} == {SLOW}, found
    # its direction into rank 0 (the limited one) among them
    assert any(f["evidence"]["dir"] == "received" and f"{ADDR0}:{SLOW} \u2194" in f["evidence"]["conn"]
               for f in warned), warned
    assert any(_port(f) == FAST for f in found), found  # the fast one was measured, and is not slow


def test_no_limit_no_slow_connection(namespaces, tmp_path):
    found = _record(tmp_path, namespaces, "free", limited=False)
    assert {_port(f) for f in found} == {FAST, SLOW}, found
    assert not [f for f in found if f["severity"] == "warning"], found
