"""counters family in a real recording without NVML. The samplers: tests/unit/test_samplers.py.
"""
import sys
import textwrap

import pytest

from timeline.kctx import samplers
from timeline.trace_processor import open_trace
from helpers import require_root, timeline_cmd

from test_samplers import MB


WORKLOAD = textwrap.dedent("""
    import time
    blob = bytearray(200 << 20)
    for i in range(0, len(blob), 4096):
        blob[i] = 1
    end = time.time() + 0.8
    while time.time() < end:
        pass
    time.sleep(0.3)
""")


def test_record_counters_without_nvml(tmp_path):
    require_root()
    path = str(tmp_path / "c.pftrace")
    cp = timeline_cmd("record", "-e", "sched,counters", "--sample-interval", "0.1", "-o", path, "--",
                      sys.executable, "-c", WORKLOAD)
    assert cp.returncode == 0, cp.stderr
    if samplers.Nvml().available:
        pytest.skip("NVML is present here: the absence path is not exercised")
    notes = [ln for ln in cp.stderr.splitlines() if "NVML" in ln]
    assert len(notes) == 1 and "no GPU counters" in notes[0]
    tp = open_trace(path)
    try:
        rows = dict(tp.query("""select t.name, max(c.value) from counter c join process_counter_track t
                                on c.track_id = t.id group by 1""").rows)
        assert rows["rss_bytes"] >= 150 * MB
        assert rows["cpu_pct"] > 10 and rows["minor_faults_per_s"] > 1000
        assert not tp.query("select * from counter_track where name like 'gpu%'").rows
    finally:
        tp.close()
