"""net family on a real 2-rank job across two network namespaces joined by a
veth pair (tests/system/net_job.py: gloo all-reduce when torch is importable,
else a socket exchange), once clean and once losing 20% of the TCP packets
the receiver's namespace gets (nftables; these kernels have no sch_netem):
connection counters and RTT on both, retransmits and the net_retransmits
warning only on the lossy one."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from timeline.registry import FAMILIES
from timeline.trace_processor import open_trace
from helpers import require_root, timeline_cmd

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "net_job.py")
ADDR0, ADDR1, PORT = "10.77.0.1", "10.77.0.2", 29500
LOSS_RULES = """table inet tl_loss {
  chain input { type filter hook input priority 0; meta l4proto tcp numgen random mod 5 == 0 drop; }
}
"""


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _has_torch() -> bool:
    return subprocess.run([sys.executable, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
                          capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def namespaces():
    require_root()
    if not FAMILIES["net"].supported():
        pytest.skip(f"net family: needs {FAMILIES['net'].requires}")
    if not shutil.which("ip"):
        pytest.skip("needs iproute2 (ip netns): scripts/setup.sh installs it")
    a, b = f"tln{os.getpid()}a", f"tln{os.getpid()}b"
    try:
        made = _ip("netns", "add", a, check=False)
        if made.returncode:
            pytest.skip(f"cannot create a network namespace: {made.stderr.strip()}")
        _ip("netns", "add", b)
        # the veth ends are named after their namespace (net_job.py sets GLOO_SOCKET_IFNAME to it)
        _ip("link", "add", a, "type", "veth", "peer", "name", b)
        for ns, addr in ((a, ADDR0), (b, ADDR1)):
            _ip("link", "set", ns, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", ns)
            _ip("-n", ns, "link", "set", ns, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield a, b
    finally:
        for ns in (a, b):
            _ip("netns", "del", ns, check=False)  # takes its veth end (and so the pair) with it


def _record(tmp, ns, name, *, lossy):
    a, b = ns
    if lossy:
        if not shutil.which("nft"):
            pytest.skip("needs nftables to drop packets: scripts/setup.sh installs it")
        r = subprocess.run(["ip", "netns", "exec", b, "nft", "-f", "-"], input=LOSS_RULES, capture_output=True,
                           text=True)
        if r.returncode and "not supported" in r.stderr.lower():
            pytest.skip(f"the kernel cannot filter packets with nftables: {r.stderr.strip()}")
        assert r.returncode == 0, r.stderr
    try:
        path = str(tmp / f"{name}.pftrace")
        mode = "gloo" if _has_torch() else "socket"
        # the softirq accounting (opt-in) on the lossy run only: its tracks there, none on the clean one
        extra = ["--net-softirq"] if lossy else []
        cp = timeline_cmd("record", "-e", "sched,net", *extra, "--keep-raw", "-o", path, "--", sys.executable, JOB,
                          "launch", a, b, ADDR0, str(PORT), "10", "4", mode, timeout=300)
        assert cp.returncode == 0, cp.stderr[-3000:]
        return path
    finally:
        if lossy:
            subprocess.run(["ip", "netns", "exec", b, "nft", "delete", "table", "inet", "tl_loss"], capture_output=True)


@pytest.fixture(scope="module")
def clean(namespaces, tmp_path_factory):
    return _record(tmp_path_factory.mktemp("net"), namespaces, "clean", lossy=False)


@pytest.fixture(scope="module")
def lossy(namespaces, tmp_path_factory):
    return _record(tmp_path_factory.mktemp("net"), namespaces, "lossy", lossy=True)


def _query(path, sql):
    tp = open_trace(path)
    try:
        return tp.query(sql).rows
    finally:
        tp.close()


def _check(path, check):
    cp = timeline_cmd("check", "--only", check, "--format", "json", path)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)["checks"][0]["findings"]


RANK_CONN = f"net {ADDR0}:%\u2194 {ADDR1}:%"  # rank 0's side of a connection to rank 1


def _conn_counters(path):
    return {r[0].rsplit(" ", 1)[1]: (r[1], r[2], r[3]) for r in _query(path, f"""
        select t.name, count(*), max(c.value), (select pid from process p where p.upid = t.upid)
        from counter c join process_counter_track t on c.track_id = t.id
        where t.name like '{RANK_CONN}' group by t.name""")}


@pytest.mark.parametrize("run", ["clean", "lossy"])
def test_connection_counters_and_rtt(run, request):
    path = request.getfixturevalue(run)
    got = _conn_counters(path)
    # the all-reduces moved 4 MiB each way per step: the connection carried them, on a track of rank 0's process
    assert {"sent_bytes_per_s", "received_bytes_per_s", "srtt_ms", "snd_cwnd", "snd_wnd", "rcv_wnd"} <= set(got), got
    assert got["sent_bytes_per_s"][1] > 0 and got["received_bytes_per_s"][1] > 0
    assert got["srtt_ms"][1] > 0 and got["snd_cwnd"][1] > 0
    sent = _query(path, f"""
        select sum(v * coalesce(span, 1e7) / 1e9) from (
          select c.value as v, lead(c.ts) over (partition by t.id order by c.ts) - c.ts as span
          from counter c join process_counter_track t on c.track_id = t.id
          where t.name like '{RANK_CONN} sent_bytes_per_s')""")[0][0]
    assert sent >= 10 * 4 * (1 << 20) * 0.9, sent  # gloo or the socket job: >= 4 MiB per step, 10 steps
    # per-thread throughput and state changes are there too
    assert _query(path, "select count(*) from counter_track where name glob 'net * (*) sent_bytes_per_s'")[0][0] > 0
    assert _query(path, "select count(*) from slice where category = 'net' and name glob 'tcp * -> ESTABLISHED'")[0][0] > 0
    softirq = _query(path, "select count(*) from counter_track where name glob 'net cpu* NET_* busy_pct'")[0][0]
    assert (softirq > 0) == (run == "lossy"), softirq  # --net-softirq on the lossy recording only


def test_lossy_run_records_retransmits_and_warns(lossy):
    rows = _query(lossy, """
        select count(*), sum(extract_arg(arg_set_id, 'debug.lost')), max(extract_arg(arg_set_id, 'debug.srtt_ms'))
        from slice where category = 'net' and name = 'tcp retransmit'""")
    n, lost, srtt = rows[0]
    assert n >= 3 and lost >= 3 and srtt > 0, rows
    findings = _check(lossy, "net_retransmits")
    warned = [f for f in findings if f["severity"] == "warning"]
    assert warned, findings
    assert ADDR0 in warned[0]["finding"] and ADDR1 in warned[0]["finding"]
    assert warned[0]["evidence"]["in_collective"] >= 3


def test_clean_run_has_no_retransmit_warning(clean, lossy):
    findings = _check(clean, "net_retransmits")
    # A loaded host can drop segments even on a clean veth (its backlog overflows while the
    # softirq waits for a CPU): at load ~3.6 a clean run lost 20-35 against the lossy run's
    # 110-160 when that one dropped 10% (now 20%: ~340), so up to a third of the lossy run's
    # count is tolerated.
    lost = sum(f["evidence"].get("retransmits") or 0 for f in findings)
    lossy_lost = sum(f["evidence"].get("retransmits") or 0 for f in _check(lossy, "net_retransmits"))
    assert lost <= max(3, lossy_lost // 3), (findings, lossy_lost)


def test_chrome_json_has_the_same_connection(lossy, tmp_path):
    out = str(tmp_path / "lossy.json")
    cp = timeline_cmd("convert", "--format", "chrome", "-o", out, lossy[:-len(".pftrace")] + ".tlraw")
    assert cp.returncode == 0, cp.stderr
    events = json.load(open(out))["traceEvents"]
    assert any(e.get("name") == "tcp retransmit" and ADDR1 in e["args"]["peer"] + e["args"]["local"] for e in events)
    assert any(e.get("ph") == "C" and e["name"].startswith(f"net {ADDR0}:") for e in events)


def test_connection_tracks_in_the_ui(lossy, tmp_path):
    """The bundled Perfetto UI (headless Chromium) draws rank 0's connection
    counters under its process; screenshot to $TIMELINE_SCREENSHOT_DIR (docs/img/)."""
    import tempfile
    import time

    from test_view import Browser, Viewer

    (pid,) = _query(lossy, f"""select distinct p.pid from process_counter_track t join process p using (upid)
                               where t.name like '{RANK_CONN} srtt_ms'""")[0]
    v = Viewer(lossy)
    browser = Browser(tempfile.mkdtemp(dir=tmp_path))
    try:
        browser.call("Emulation.setDeviceMetricsOverride", width=1600, height=1000, deviceScaleFactor=1, mobile=False)
        browser.call("Page.navigate", url=v.url)
        browser.open_process(pid)  # the rank's process group: its connection tracks are inside
        want = f"net {ADDR0}:"
        txt = browser.wait_for_text([want, "srtt_ms", "sent_bytes_per_s"], 60)
        time.sleep(1.5)
        shot = str(tmp_path / "net-connection-tracks.png")
        browser.screenshot(shot)
        if os.environ.get("TIMELINE_SCREENSHOT_DIR"):
            shutil.copy(shot, os.environ["TIMELINE_SCREENSHOT_DIR"])
        assert want in txt and "srtt_ms" in txt and "sent_bytes_per_s" in txt, txt[-3000:]
    finally:
        browser.close()
        v.stop()


def test_rank_straggler_names_the_network_on_the_lossy_run_only(clean, lossy):
    """Both ranks sleep while segments are retransmitted: no rank is computing,
    so the wait is blamed on the network, naming the connection between them."""
    warned = [f for f in _check(lossy, "rank_straggler") if f["severity"] == "warning"]
    net = [f for f in warned if "waiting on the network" in f["finding"]]
    assert net, warned
    assert net[0]["evidence"]["retransmits"] >= 3 and net[0]["evidence"]["share"] >= 0.3, net
    assert ADDR0 in net[0]["finding"] and ADDR1 in net[0]["finding"], net
    quiet = _check(clean, "rank_straggler")
    # The "clean" veth of this VM retransmits too: 600-1,800 fast retransmits in three runs of the job
    # with no recorder at all (nstat TcpRetransSegs, TCPSACKReorder: it reorders), so a clean run's
    # waits may hold some and be blamed on the network, rightly.  What must hold: far fewer than
    # the run that drops 20% of the packets, and nothing else blamed.
    lossy_rtx = net[0]["evidence"]["retransmits"]
    assert all(f["evidence"]["retransmits"] * 3 <= lossy_rtx for f in quiet if "network" in f["finding"]), \
        (quiet, lossy_rtx)
    assert all(f["severity"] == "ok" or "network" in f["finding"] for f in quiet), quiet


def test_merged_recordings_label_connections_with_the_peer_rank(namespaces, tmp_path):
    """One recorder per namespace (each rank on its own 'machine'), merged:
    each rank's connection to the other is labelled with the other's rank."""
    a, b = namespaces
    mode = "gloo" if _has_torch() else "socket"
    port = str(PORT + 11)  # not the port the other recordings' listeners left in TIME_WAIT
    procs, paths = [], []
    for rank, ns in enumerate((a, b)):
        paths.append(str(tmp_path / f"rank{rank}.pftrace"))
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", GLOO_SOCKET_IFNAME=ns)
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "timeline.cli", "record", "-q", "-e", "sched,net",
             "-o", paths[-1], "--", sys.executable, JOB, "rank", str(rank), ADDR0, port, "5", "1", mode],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    merged = str(tmp_path / "job.pftrace")
    cp = timeline_cmd("merge", "-o", merged, *paths)
    assert cp.returncode == 0, cp.stderr
    names = [r[0] for r in _query(merged, "select name from process_counter_track where name glob 'net *'")]
    to_rank1 = [n for n in names if n.startswith(f"net {ADDR0}:") and f"\u2194 {ADDR1}:" in n]
    to_rank0 = [n for n in names if n.startswith(f"net {ADDR1}:") and f"\u2194 {ADDR0}:" in n]
    assert to_rank1 and to_rank0, names
    assert any(" (rank 1) " in n for n in to_rank1) and any(" (rank 0) " in n for n in to_rank0), names
    assert not [n for n in to_rank1 if " (rank 0) " in n] and not [n for n in to_rank0 if " (rank 1) " in n], names
