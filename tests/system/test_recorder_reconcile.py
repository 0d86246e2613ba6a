"""RecorderContext.processes reconciled with the BPF tracked map (real eBPF). The rest of
the recorder's parts: tests/unit/test_recorder_units.py.
"""
import struct
import threading

from timeline import proc_records as proc_ring
from timeline.bpf_session import BpfSession
from timeline.recorder_plugins import RecorderContext
from helpers import require_root


def test_reconcile_with_the_tracked_map():
    """Proc records lost to a full ring: the tracked map puts the set right."""
    require_root()
    session = BpfSession(["proc"])
    try:
        c = RecorderContext(None, session, None, threading.Lock())
        c.add_processes([500, 600])  # 600 exited, its exit record lost
        for tid, tgid in ((500, 500), (501, 500), (700, 700)):  # 700 forked, its record lost
            session.track(tid, tgid)
        gen500 = c.processes[500]
        c.reconcile_processes()  # not due yet: nothing changes
        c._reconcile_at = 0
        c.reconcile_processes()  # due, but no proc record was lost: the map is not walked
        assert sorted(c.processes) == [500, 600]
        drops = session.objects["proc"].map("drops")  # what the proc programs count when the ring is full
        drops.update(struct.pack("<I", proc_ring.RING_PROC), struct.pack("<Q", 1) * session.ncpu)
        c._reconcile_at = 0
        c.reconcile_processes()
        assert sorted(c.processes) == [500, 700] and c.processes[500] == gen500
        session.track(800, 800)
        c._reconcile_at = 0
        c.reconcile_processes()  # no further loss: not walked again
        assert sorted(c.processes) == [500, 700]
    finally:
        session.close()
