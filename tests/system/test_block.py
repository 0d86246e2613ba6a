"""block family: requests of the tracked tree as async slices per disk, and disk counters."""
import sys
import textwrap

import pytest

from timeline.trace_processor import open_trace
from helpers import require_root, timeline_cmd


# O_DIRECT: every 64 KiB pwrite/pread is one block request from this thread.
WORKLOAD = textwrap.dedent("""
    import ctypes, mmap, os, sys, threading
    def run():
        ctypes.CDLL(None).prctl(15, b"direct-io", 0, 0, 0)
        path = os.path.join(sys.argv[1], "direct.bin")
        buf = mmap.mmap(-1, 1 << 16)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT | os.O_SYNC, 0o600)
        for i in range(16):
            os.pwrite(fd, buf, i << 16)
        for i in range(16):
            os.preadv(fd, [buf], i << 16)
        os.close(fd)
        os.unlink(path)
    t = threading.Thread(target=run); t.start(); t.join()
""")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    require_root()
    d = tmp_path_factory.mktemp("block")
    path = str(d / "t.pftrace")
    cp = timeline_cmd("record", "-e", "block", "-o", path, "--", sys.executable, "-c", WORKLOAD, str(d))
    assert cp.returncode == 0, cp.stderr
    tp = open_trace(path)
    yield tp
    tp.close()


def _direct(tp):
    return tp.query("""
        select s.name, s.dur, t.name, extract_arg(s.arg_set_id, 'debug.bytes'), extract_arg(s.arg_set_id, 'debug.rw'),
               extract_arg(s.arg_set_id, 'debug.disk'), extract_arg(s.arg_set_id, 'debug.dev'),
               extract_arg(s.arg_set_id, 'debug.sector'), extract_arg(s.arg_set_id, 'debug.tid'),
               extract_arg(s.arg_set_id, 'debug.pid'), extract_arg(s.arg_set_id, 'debug.device_ns')
        from slice s join track t on s.track_id = t.id
        where s.cat = 'block_io' and extract_arg(s.arg_set_id, 'debug.thread') = 'direct-io'""").rows


def test_direct_io_requests(trace):
    rows = _direct(trace)
    reads = [r for r in rows if r[0] == "read" and r[3] == 65536]
    writes = [r for r in rows if r[0] == "write" and r[3] == 65536]
    assert len(reads) == 16 and len(writes) >= 16
    for r in reads + writes:
        assert r[2] == f"{r[5]} I/O"  # the disk's own track
        assert r[1] > 0 and r[10] is not None and 0 <= r[10] <= r[1]
        assert r[4].startswith(r[0][0].upper()) and r[7] >= 0
        assert r[6].count(":") == 1 and r[8] != r[9]  # a thread of the process, not its leader
    assert len({r[7] for r in reads}) == 16  # distinct sectors


def test_disk_counters(trace):
    disk = _direct(trace)[0][5]
    names = {r[0] for r in trace.query("select name from counter_track").rows}
    assert {f"{disk} read_bytes_per_s", f"{disk} write_bytes_per_s", f"{disk} latency_ms", f"{disk} in_flight"} <= names
    (peak,) = trace.query(f"""select max(c.value) from counter c join counter_track t on c.track_id = t.id
                              where t.name = '{disk} read_bytes_per_s'""").rows[0]
    assert peak >= 65536 * 10  # at least one 64 KiB read in a 100 ms bin
    inflight = trace.query(f"""select c.value from counter c join counter_track t on c.track_id = t.id
                               where t.name = '{disk} in_flight' order by c.ts""").rows
    assert inflight[-1][0] == 0 and max(v for (v,) in inflight) >= 1
