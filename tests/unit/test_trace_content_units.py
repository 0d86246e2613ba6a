"""The bundled sample trace loads in trace_processor. Recordings:
tests/system/test_trace_content.py.
"""
import os

from timeline.trace_processor import open_trace
from helpers import REPO


def test_sample_trace_loads():
    path = os.path.join(REPO, "sample_traces", "train_cpu.pftrace")
    with open_trace(path) as tp:
        names = {r[0] for r in tp.query("select distinct name from thread").rows}
        assert "pt_data_worker" in names
        (n,) = tp.query("select count(*) from sched").rows[0]
        assert n > 1000
