"""cgroup_limits', net_throughput's and net_retransmits' partials (timeline/checks/partials) give
the findings their SQL gives on the same synthetic raw log converted as one trace; the set's
come from its index (FROM_INDEX). The SQL through the wasm trace_processor."""
from __future__ import annotations

import json

import numpy as np
import pytest

from rawlog_factory import BOOT0, LogBuilder, end_block
from timeline import events as ev
from timeline.checks import run_checks
from timeline.checks.traceset import FROM_INDEX, check_set
from timeline.converters import convert
from timeline.converters.trace_set import SplitSpec
from timeline.identity import invoking_user
from timeline.memory import cgroup_records as CG
from timeline.net import records as NR
from timeline.trace_processor import TraceProcessorConfig, open_trace

PID, TID = 1000, 1000
SPAN_MS = 1000


def ms(t: float) -> int:
    return BOOT0 + int(round(t * 1e6))


def base_log() -> LogBuilder:
    b = LogBuilder(ncpu=2, target_pid=PID)
    b.procs(ms(0), [{"pid": PID, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
                     "threads": [{"tid": TID, "comm": "python3"}]}])
    b.switch(ms(0), 0, 5, TID, prev_tracked=False)
    b.switch(ms(SPAN_MS), 0, TID, 5, prev_state=1, next_tracked=False)
    b.flush()
    return b


def cgroup_log(samples: dict, names=None) -> LogBuilder:
    """samples: {cgroup index: [(ms, {counter name: raw value})]} as the sampler reads them."""
    b = base_log()
    b.header["rings"][str(CG.RING_CGROUP)] = {"name": "cgroup", "record_size": CG.CGROUP_SAMPLE_EVENT.itemsize,
                                              "stride": ev.ring_stride(CG.CGROUP_SAMPLE_EVENT)}
    b.blocks.append(("meta", {"type": "cgroup_names", "ts": ms(0),
                              "cgroups": {str(i): (names or {}).get(i, f"/job{i}") for i in samples}}))
    rows = [(ms(t), v, cg, CG.COUNTER_IDS[k]) for cg, pts in samples.items() for t, vals in pts
            for k, v in vals.items()]
    rows.sort()
    r = np.zeros(len(rows), CG.CGROUP_SAMPLE_EVENT)
    for i, (ts, v, cg, c) in enumerate(rows):
        r[i] = (ts, v, cg, c, CG.CGROUP_SAMPLE, 0)
    for i in range(0, r.size, 7):
        b.blocks.append(("ring", (CG.RING_CGROUP, ev.encode_ring_bytes(r[i:i + 7]))))
    return b


def both_ways(tmp_path, b: LogBuilder, check: str, split_ms: float = 100, stop_ms: float = SPAN_MS + 1):
    raw = b.write(str(tmp_path / "run.tlraw"), end=end_block(stop_ts=ms(stop_ms)))
    one = str(tmp_path / "one.pftrace")
    convert(raw, one)
    res = convert(raw, str(tmp_path / "set.pftrace"), split=SplitSpec(duration_ns=int(split_ms * 1e6)))
    with open(f"{res.out_path}/index.json") as f:
        index = json.load(f)
    with open_trace(one, engine="wasm") as tp:
        r = next(x for x in run_checks(tp, one, only=[check]).results)
    got = check_set(res.out_path, TraceProcessorConfig(engine="wasm"), invoking_user(), ids=[check],
                    workers=1).results[0]
    return (r.status, r.findings), got, index


def throttled(cg, periods_per_s, share, t0=0, t1=SPAN_MS, step=50, extra=None):
    """A cgroup's samples every `step` ms: `share` of its periods throttled, 1 ms each."""
    out = []
    for t in range(t0, t1 + 1, step):
        p = int(periods_per_s * t / 1000)
        vals = {"cpu.nr_periods": 1000 + p, "cpu.nr_throttled": 10 + int(p * share),
                "cpu.throttled_usec": 5000 + int(p * share) * 1000}
        vals.update((extra or {}).get(t, {}))
        out.append((t, vals))
    return {cg: out}


CGROUP_CASES = {
    "throttled": lambda: {**throttled(1, 1000, 0.5), **throttled(2, 1000, 0.1, t0=120, t1=870)},
    "memory": lambda: throttled(3, 1000, 0.0, extra={
        t: {"memory.events.high": 2 + max(0, t - 300) // 50, "memory.events.max": 1 + (t >= 610),
            "memory.events.oom_kill": (t >= 900)} for t in range(0, SPAN_MS + 1, 50)}),
    "v1": lambda: {4: [(t, {"memory.failcnt": 7 + t // 100, "memory.oom_kill": 0}) for t in range(5, 990, 45)]},
    "nothing": lambda: throttled(5, 1000, 0.0),
    # the cgroup removed and made anew: its counts fall back (the largest is the finding)
    "reset": lambda: {6: [(t, {"memory.events.max": 3 + (t // 40 if t < 500 else t // 200)}) for t in range(0, 990, 40)]},
}


@pytest.mark.parametrize("case", sorted(CGROUP_CASES))
def test_cgroup_limits_partial_gives_the_sql_findings(tmp_path, case):
    """Counters crossing ~10 chunk boundaries; throttling, memory events (v2, v1), a reset, none."""
    want, got, index = both_ways(tmp_path, cgroup_log(CGROUP_CASES[case]()), "cgroup_limits")
    assert len(index["chunks"]) > 5 and "cgroup_limits" in index["partials"]
    assert got.note == FROM_INDEX and (got.status, got.findings) == want
    assert want[1] or case == "nothing"


def test_cgroup_limits_declines_where_the_span_is_not_certain(tmp_path):
    """The log ends 8 ms after its last event: 1.00 s or 1.01 s, the SQL decides (and still agrees)."""
    want, got, index = both_ways(tmp_path, cgroup_log(throttled(1, 1000, 0.5)), "cgroup_limits", stop_ms=SPAN_MS + 8)
    assert "cgroup_limits" in index["partials"]
    assert got.note != FROM_INDEX and (got.status, got.findings) == want


def test_cgroup_limits_memory_only_needs_no_span(tmp_path):
    """No throttling row prints the span: from the index whatever the log's end."""
    want, got, _ = both_ways(tmp_path, cgroup_log(CGROUP_CASES["v1"]()), "cgroup_limits", stop_ms=SPAN_MS + 8)
    assert got.note == FROM_INDEX and (got.status, got.findings) == want and want[1]


# -- net_throughput ---------------------------------------------------------------------------

PEER_PID = 2000


def net_log(conns) -> LogBuilder:
    """conns: [(tgid, tid, (local ip, port), (peer ip, port), [(ms, tx bytes, rx bytes)])]: NET_IO records."""
    b = base_log()
    b.procs(ms(0), [{"pid": PEER_PID, "ppid": 1, "comm": "python3", "cmdline": ["python3", "peer.py"],
                     "threads": [{"tid": PEER_PID, "comm": "python3"}]}])
    b.header["rings"][str(NR.RING_NET)] = {"name": "net", "record_size": NR.NET_EVENT.itemsize,
                                           "stride": ev.ring_stride(NR.NET_EVENT)}
    recs = []
    for tgid, tid, (lip, lport), (pip, pport), io in conns:
        for t, tx, rx in io:
            r = np.zeros(1, NR.NET_EVENT)
            r["kind"], r["ts"], r["end_ts"], r["tid"], r["tgid"] = NR.NET_IO, ms(t), ms(t), tid, tgid
            r["family"], r["sport"], r["dport"], r["tx_bytes"], r["rx_bytes"] = 2, lport, pport, tx, rx
            r["saddr"][0, :4], r["daddr"][0, :4] = lip, pip
            recs.append(r)
    a = np.concatenate(recs)
    a = a[np.argsort(a["ts"], kind="stable")]
    for i in range(0, a.size, 11):
        b.blocks.append(("ring", (NR.RING_NET, ev.encode_ring_bytes(a[i:i + 11]))))
    return b


A, B, C = ((10, 0, 0, 1), 41000), ((10, 0, 0, 2), 29500), ((10, 0, 0, 3), 29500)
MIB = 1 << 20


def burst(t0, t1, step, nbytes, rx=False):
    return [(t, 0, nbytes) if rx else (t, nbytes, 0) for t in np.arange(t0, t1, step).tolist()]


NET_CASES = {
    # A sends to B (B's receiving end recorded: its row counts, A's sent row not), and to C (no
    # receiving end: its sent row counts) slower (a warning), in bursts across chunks
    "slow_peer": lambda: [(PID, TID, A, B, burst(5, 905, 3.3, 400_000)),
                          (PEER_PID, PEER_PID, B, A, burst(6, 906, 3.3, 400_000, rx=True)),
                          (PID, TID + 0, ((10, 0, 0, 1), 41001), C, burst(100, 700, 7, 123_457) +
                           burst(750, 990, 10, 654_321))],
    "even": lambda: [(PID, TID, A, B, burst(5, 905, 4, 300_000)),
                     (PID, TID, ((10, 0, 0, 1), 41001), C, burst(50, 950, 4, 280_000))],
    "small": lambda: [(PID, TID, A, B, burst(5, 305, 40, 2000))],
}


@pytest.mark.parametrize("case", sorted(NET_CASES))
def test_net_throughput_partial_gives_the_sql_findings(tmp_path, case):
    want, got, index = both_ways(tmp_path, net_log(NET_CASES[case]()), "net_throughput")
    assert len(index["chunks"]) > 5 and "net_throughput" in index["partials"]
    assert got.note == FROM_INDEX and (got.status, got.findings) == want and want[1]


def test_net_throughput_past_its_cap_runs_the_sql(tmp_path, monkeypatch):
    from timeline.checks.partials import net_throughput
    monkeypatch.setattr(net_throughput, "MAX_SAMPLES", 50)
    want, got, index = both_ways(tmp_path, net_log(NET_CASES["slow_peer"]()), "net_throughput")
    assert "net_throughput" not in index.get("partials", {}) and got.note != FROM_INDEX


# -- net_retransmits --------------------------------------------------------------------------

def with_retransmits(conns, rx):
    """net_log(conns) plus NET_RETRANSMIT records rx: [(ms, tid, tgid, ca_state)] on A ↔ B."""
    b = net_log(conns)
    r = np.zeros(len(rx), NR.NET_EVENT)
    for i, (t, tid, tgid, ca) in enumerate(rx):
        r[i]["kind"], r[i]["ts"], r[i]["tid"], r[i]["tgid"], r[i]["oldstate"] = NR.NET_RETRANSMIT, ms(t), tid, tgid, ca
        r[i]["newstate"], r[i]["srtt_us"], r[i]["family"], r[i]["sport"], r[i]["dport"] = 1, 1234, 2, A[1], B[1]
        r[i]["saddr"][:4], r[i]["daddr"][:4] = A[0], B[0]
    for i in range(0, r.size, 3):
        b.blocks.append(("ring", (NR.RING_NET, ev.encode_ring_bytes(r[i:i + 3]))))
    return b


RX_CASES = {
    # tail loss probes (ca open/disorder/cwr) across chunks, one on tid 0 (a timer in softirq)
    "probes": [(50, TID, PID, 0), (150.5, TID, PID, 1), (420, 0, 0, 2), (777, PEER_PID, PEER_PID, 0)],
    "none": [],
}


@pytest.mark.parametrize("case", sorted(RX_CASES))
def test_net_retransmits_partial_gives_the_sql_findings(tmp_path, case):
    b = with_retransmits(NET_CASES["even"](), RX_CASES[case])
    want, got, index = both_ways(tmp_path, b, "net_retransmits")
    assert len(index["chunks"]) > 5 and "net_retransmits" in index["partials"]
    assert got.note == FROM_INDEX and (got.status, got.findings) == want and want[1]


def test_net_retransmits_after_a_loss_runs_the_sql(tmp_path):
    b = with_retransmits(NET_CASES["even"](), RX_CASES["probes"] + [(600, TID, PID, 3)])
    want, got, index = both_ways(tmp_path, b, "net_retransmits")
    assert "net_retransmits" not in index.get("partials", {}) and got.note != FROM_INDEX
    assert want[0] != "ok"
