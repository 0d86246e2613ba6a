"""`timeline merge` with clock snapshots no machine can have, or that disagree:
one line and exit 2 with nothing written, never a protobuf `Value out of range`
traceback; a wall clock stepped during a recording is a warning (the first
snapshot aligns).  The traces are built here, a few packets each."""
import os

import pytest

from helpers import timeline_cmd
from timeline.converters import merge_traces as mt

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

BOOT = 10**12                       # booted 1000 s ago
WALL = 1_700_000_000 * 10**9        # Nov 2023


def make_trace(path, snapshots, host="node", times=None, ftrace_times=()):
    """A small trace as timeline writes one: a clock snapshot first (more at
    the end), the host, three slice events (at `times`, default just after the
    first snapshot's BOOTTIME), and optionally an ftrace bundle."""
    t = pb.Trace()

    def snapshot(clocks):
        pkt = t.packet.add()
        for cid, ts in clocks.items():
            pkt.clock_snapshot.clocks.add(clock_id=cid, timestamp=ts)

    snapshot(snapshots[0])
    t.packet.add().chrome_events.metadata.add(name="timeline_host", string_value=host)
    td = t.packet.add().track_descriptor
    td.uuid, td.name = 7, "work"
    first_boot = snapshots[0].get(mt.CLOCK_BOOTTIME, BOOT)
    for ts in times if times is not None else [first_boot + i * 1000 for i in range(3)]:
        pkt = t.packet.add(timestamp=ts, trusted_packet_sequence_id=1)
        pkt.track_event.type = pb.TrackEvent.TYPE_INSTANT
        pkt.track_event.track_uuid = 7
    if ftrace_times:
        bundle = t.packet.add().ftrace_events
        bundle.cpu = 0
        for ts in ftrace_times:
            bundle.event.add(timestamp=ts, pid=1)
    for clocks in snapshots[1:]:
        snapshot(clocks)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())
    return str(path)


def clocks(boot, wall):
    return {mt.CLOCK_BOOTTIME: boot, mt.CLOCK_REALTIME: wall}


@pytest.fixture
def good(tmp_path):
    return make_trace(tmp_path / "good.pftrace", [clocks(BOOT, WALL), clocks(BOOT + 10**9, WALL + 10**9)])


def merge(tmp_path, *inputs):
    out = tmp_path / "out" / "job.pftrace"
    out.parent.mkdir(exist_ok=True)
    cp = timeline_cmd("merge", *inputs, "-o", str(out), timeout=60)
    return cp, out


def assert_refused(cp, out, *wanted):
    assert cp.returncode == 2, (cp.returncode, cp.stderr)
    assert cp.stderr.startswith("timeline: error: ") and cp.stderr.count("\n") == 1, cp.stderr
    assert "Traceback" not in cp.stderr and "Value out of range" not in cp.stderr
    for w in wanted:
        assert w in cp.stderr, cp.stderr
    assert os.listdir(out.parent) == [], os.listdir(out.parent)  # no output, no temporary


BAD_SNAPSHOTS = {
    "realtime_near_2_64": ([clocks(BOOT, 2**64 - 5)], "past 2^63 ns"),
    "realtime_0_large_boottime": ([clocks(10**18, 0)], "a boot before 1970"),
    "boottime_past_2_63": ([clocks(2**63 + 1, WALL)], "past 2^63 ns"),
    "second_snapshot_near_2_64": ([clocks(BOOT, WALL), clocks(BOOT + 10**9, 2**64 - 1)], "past 2^63 ns"),
    "monotonic_past_2_63": ([{**clocks(BOOT, WALL), 3: 2**63}], "past 2^63 ns"),
}


@pytest.mark.parametrize("case", sorted(BAD_SNAPSHOTS))
@pytest.mark.parametrize("reference", [True, False], ids=["first", "second"])
def test_snapshot_out_of_range_is_one_line(tmp_path, good, case, reference):
    snaps, why = BAD_SNAPSHOTS[case]
    bad = make_trace(tmp_path / "bad.pftrace", snaps, times=[BOOT])
    cp, out = merge(tmp_path, *((bad, good) if reference else (good, bad)))
    assert_refused(cp, out, bad, "its clock snapshot is out of range", why)


def test_disagreeing_snapshots_that_move_times_below_zero(tmp_path):
    """The second snapshot's BOOTTIME (5 ns) disagrees with the first by ~1000 s;
    the input's clock shift (-1000 s against a machine booted just now) would
    put it below 0."""
    ref = make_trace(tmp_path / "ref.pftrace", [clocks(10**9, WALL)])
    bad = make_trace(tmp_path / "bad.pftrace", [clocks(BOOT, WALL), clocks(5, WALL + 10**9)])
    cp, out = merge(tmp_path, ref, bad)
    assert_refused(cp, out, f"{bad} cannot be aligned with {ref}", "leave the range", "-999 s")


def test_packet_time_past_2_63_is_refused(tmp_path, good):
    bad = make_trace(tmp_path / "bad.pftrace", [clocks(BOOT, WALL)], times=[BOOT, 2**64 - 1])
    cp, out = merge(tmp_path, good, bad)
    assert_refused(cp, out, bad, "leave the range")


def test_ftrace_time_shifted_below_zero_is_refused(tmp_path):
    """Times inside ftrace bundles are only seen while rewriting: refused
    there, and the half-written output is discarded."""
    ref = make_trace(tmp_path / "ref.pftrace", [clocks(10**9, WALL)])
    bad = make_trace(tmp_path / "bad.pftrace", [clocks(BOOT, WALL)], ftrace_times=[BOOT, 3])
    cp, out = merge(tmp_path, ref, bad)
    assert_refused(cp, out, bad, "one of its timestamps moved by its clock shift")


def test_stepped_wall_clock_is_a_warning_and_the_first_snapshot_aligns(tmp_path):
    """rt - bt changes only when the wall clock is stepped (NTP slews move
    BOOTTIME too): the merge goes on, aligned by the first snapshot, and says so."""
    ref = make_trace(tmp_path / "ref.pftrace", [clocks(BOOT, WALL)], host="a")
    stepped = make_trace(tmp_path / "stepped.pftrace",
                         [clocks(BOOT - 5 * 10**9, WALL), clocks(BOOT, WALL + 7 * 10**9)], host="b")
    cp, out = merge(tmp_path, ref, stepped)
    assert cp.returncode == 0, cp.stderr
    warnings = [ln for ln in cp.stderr.splitlines() if ln.startswith("timeline: warning:")]
    assert len(warnings) == 1 and stepped in warnings[0] and "disagree by +2.000 s" in warnings[0], cp.stderr
    assert "machine 1: b" in cp.stderr and "clock shift +5.000000 s" in cp.stderr, cp.stderr
    merged = pb.Trace.FromString(out.read_bytes())
    times = sorted(p.timestamp for p in merged.packet if p.machine_id == 1 and p.HasField("track_event"))
    assert times == [BOOT + i * 1000 for i in range(3)], times


def test_agreeing_snapshots_give_no_warning(tmp_path, good):
    other = make_trace(tmp_path / "other.pftrace", [clocks(BOOT + 3, WALL + 3), clocks(BOOT + 10**9, WALL + 10**9)])
    cp, out = merge(tmp_path, good, other)
    assert cp.returncode == 0 and "warning" not in cp.stderr, cp.stderr
    assert out.stat().st_size > 0
