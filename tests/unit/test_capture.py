"""Recording windows (issue 15): --delay keeps the process tree from the start."""
import numpy as np

from timeline import events, proc_records, sched_records
from timeline.capture import CaptureWindow


def test_window_keeps_proc_whole_and_others_from_start():
    sched = np.zeros(6, sched_records.SCHED_EVENT)
    sched["ts"] = [10, 20, 30, 40, 50, 60]
    proc = np.zeros(3, proc_records.PROC_EVENT)
    proc["ts"] = [5, 35, 70]
    w = CaptureWindow(35)
    kept = events.decode_ring_bytes(w.keep(sched_records.RING_SCHED, events.encode_ring_bytes(sched),
                                           events.ring_stride(sched_records.SCHED_EVENT)), sched_records.SCHED_EVENT)
    assert list(kept["ts"]) == [40, 50, 60]
    raw = events.encode_ring_bytes(proc)
    assert w.keep(proc_records.RING_PROC, raw, events.ring_stride(proc_records.PROC_EVENT)) == raw


def test_toggle_intervals():
    w = CaptureWindow(100)  # delayed start
    assert not w.is_on(50)
    assert w.toggle(60)  # SIGUSR1 before the delay ends: start now
    assert w.is_on(70) and not w.toggle(80) and not w.is_on(90)
    assert w.toggle(120) and w.is_on(10**12)
    sched = np.zeros(5, sched_records.SCHED_EVENT)
    sched["ts"] = [55, 65, 85, 119, 130]
    kept = events.decode_ring_bytes(w.keep(sched_records.RING_SCHED, events.encode_ring_bytes(sched),
                                           events.ring_stride(sched_records.SCHED_EVENT)), sched_records.SCHED_EVENT)
    assert list(kept["ts"]) == [65, 130]

