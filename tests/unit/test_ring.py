"""--ring flight recorder (issue 15): bounded segments, the last DURATION at exit, SIGUSR2 dumps."""
import glob

from timeline.commands.record import dump_name
from helpers import read_raw


def test_dump_names():
    def expand(t, n):
        return t.replace("%n", str(n)) if n is not None else t
    assert dump_name("run.pftrace", 3, expand) == "run.3.pftrace"
    assert dump_name("run.json.gz", 2, expand) == "run.2.json.gz"
    assert dump_name("run-%n.pftrace", 4, expand) == "run-4.pftrace"
    assert dump_name("noext", 1, expand) == "noext.1"


def test_segments_rotate_drop_and_dump_carries_state(tmp_path, monkeypatch):
    """SegmentedLog alone, on a made-up clock: 20 s of sched records with --ring 5s."""
    import numpy as np
    from timeline import events, proc_records, ringlog, sched_records
    from timeline.registry import RING_DTYPES

    clock = [10**9]
    monkeypatch.setattr(ringlog, "boottime_ns", lambda: clock[0])
    header = {"rings": {str(r): {"stride": events.ring_stride(RING_DTYPES[r])}
                        for r in (sched_records.RING_SCHED, proc_records.RING_PROC)}}
    log = ringlog.SegmentedLog(str(tmp_path / "x.tlraw"), header, 5.0)
    proc = np.zeros(1, proc_records.PROC_EVENT)
    proc["ts"], proc["kind"], proc["tid"] = clock[0], proc_records.PROC_RENAME, 77
    log.write_ring(proc_records.RING_PROC, events.encode_ring_bytes(proc))
    log.write_meta({"type": "procs", "ts": clock[0]})
    counts = []
    for step in range(200):  # 0.1 s apart
        clock[0] += 10**8
        sched = np.zeros(1, sched_records.SCHED_EVENT)
        sched["ts"] = clock[0]
        log.write_ring(sched_records.RING_SCHED, events.encode_ring_bytes(sched))
        counts.append(len(glob.glob(str(tmp_path / "x.tlraw.seg*"))))
    assert max(counts) <= 6 and counts[-1] >= 5
    log.close()
    log.dump(str(tmp_path / "d.tlraw"), {"reason": "test"})
    raw = read_raw(str(tmp_path / "d.tlraw"))
    ts = raw["sched"]["ts"].astype(np.int64)
    assert ts.min() >= clock[0] - 5 * 10**9 and ts.max() == clock[0]
    assert len(ts) == 51  # exactly the last 5 s: [now - 5 s, now], 0.1 s apart
    assert list(raw["proc"]["tid"]) == [77]  # written once, 20 s before, carried forward; not repeated
    assert [m["type"] for m in raw["metas"]] == ["procs"] and raw["finalized"]
    log.remove_segments()
    assert not glob.glob(str(tmp_path / "x.tlraw.seg*"))
