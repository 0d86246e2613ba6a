"""The values the recorder and the read-side commands pass around (issue 21):
the raw-log sink (plain or ring, one interface), the invoking user, the
trace-processor choice.  No root, no BPF."""
import glob
import os
import threading

import numpy as np
import pytest

from helpers import read_raw
from timeline import events, identity, proc_records, sched_records
from timeline.rawlog_sink import PlainLog, RingLog, RingOptions, open_raw_log
from timeline.registry import RING_DTYPES
from timeline.trace_processor import TraceProcessorConfig

HEADER = {"rings": {str(r): {"stride": events.ring_stride(RING_DTYPES[r])}
                    for r in (sched_records.RING_SCHED, proc_records.RING_PROC)}}
END = {"reason": "test", "stop_ts": 0}


def _sched_block(ts: int) -> bytes:
    rec = np.zeros(1, sched_records.SCHED_EVENT)
    rec["ts"] = ts
    return events.encode_ring_bytes(rec)


def _stats(reason: str) -> dict:
    return {"reason": reason, "stop_ts": 0}


def test_open_raw_log_picks_the_kind(tmp_path):
    ours = identity.InvokingUser.ourselves()
    plain = open_raw_log(str(tmp_path / "p.tlraw"), HEADER, ours, None, print)
    ring = open_raw_log(str(tmp_path / "r.tlraw"), HEADER, ours, RingOptions(5.0, lambda n: "unused"), print)
    assert isinstance(plain, PlainLog) and isinstance(ring, RingLog)
    plain.discard()
    ring.discard()
    assert not os.listdir(tmp_path)  # neither the log nor a segment is left


def test_plain_log_has_no_dump_and_ends_with_its_own_file(tmp_path):
    path = str(tmp_path / "p.tlraw")
    log = PlainLog(path, HEADER, None)
    log.start(lambda ring, rows: None, threading.Lock())
    log.write_ring(sched_records.RING_SCHED, _sched_block(123))
    log.dump("SIGUSR2", _stats)  # nothing to write: the whole recording is this file
    assert log.dumps == 0 and os.listdir(tmp_path) == ["p.tlraw"]
    log.recording_ends()
    log.finish(END)
    end = log.end(END, None)
    log.close()
    try:
        assert end.error is None and end.kept_segments == [] and end.note is None
        assert end.size == os.fstat(end.fd).st_size
        os.unlink(path)  # read back through the descriptor, never by name
        raw = read_raw(f"/proc/self/fd/{end.fd}")
    finally:
        os.close(end.fd)
    assert raw["finalized"] and list(raw["sched"]["ts"]) == [123]


def test_ring_log_dumps_while_recording_and_says_a_failed_one(tmp_path):
    written, warnings = [], []
    names = {1: str(tmp_path / "d1.tlraw"), 2: str(tmp_path / "missing" / "d2.tlraw")}
    ring = RingOptions(5.0, names.__getitem__, lambda path, n, fd: (written.append((path, n)), os.close(fd)))
    log = RingLog(str(tmp_path / "r.tlraw"), HEADER, None, ring, warnings.append)
    log.start(lambda r, rows: None, threading.Lock())
    log.write_ring(sched_records.RING_SCHED, _sched_block(1))
    log.dump("SIGUSR2", _stats)
    log.dump("hang", _stats)  # its directory does not exist: one line, recording goes on
    log.write_ring(sched_records.RING_SCHED, _sched_block(2))
    assert written == [(names[1], 1)] and log.dumps == 2
    assert len(warnings) == 1 and warnings[0].startswith("dump 2 (hang): ")
    assert read_raw(names[1])["end"]["reason"] == "dump 1 (SIGUSR2)"
    log.discard()


def test_ring_log_end_names_the_segments_when_the_raw_log_cannot_be_written(tmp_path):
    path = str(tmp_path / "r.tlraw")
    log = RingLog(path, HEADER, None, RingOptions(5.0, str), print)
    log.write_ring(sched_records.RING_SCHED, _sched_block(1))
    log.recording_ends()
    log.finish(END)
    os.mkdir(path)  # the raw log's name is taken by something it cannot replace
    end = log.end(END, None)
    log.close()
    segments = glob.glob(path + ".seg*")
    assert end.fd == -1 and "directory" in end.error and end.kept_segments == segments and segments


def test_invoking_user_is_one_value_knowing_sudo_mode(monkeypatch):
    monkeypatch.delenv("SUDO_UID", raising=False)
    me = identity.invoking_user()
    assert not me.sudo and me.uid == os.geteuid()
    if os.geteuid() != 0:
        pytest.skip("sudo mode is root started through sudo")
    monkeypatch.setenv("SUDO_UID", "65534")
    monkeypatch.setenv("SUDO_GID", "65534")
    them = identity.invoking_user()
    assert them.sudo and (them.uid, them.gid) == (65534, 65534) and 65534 in them.groups
    monkeypatch.setenv("SUDO_UID", "0")  # root through sudo is root: nothing to switch to
    assert not identity.invoking_user().sudo


def test_trace_processor_config_is_checked_when_made():
    assert TraceProcessorConfig() == TraceProcessorConfig("auto", None, True)
    with pytest.raises(ValueError):
        TraceProcessorConfig(engine="sqlite")
