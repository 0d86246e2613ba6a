"""Recorder parts without a recording: RecorderContext.processes (the recorded
processes, kept from proc ring records) and the main thread's sleep."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from timeline import events
from timeline import proc_records as proc_ring
from timeline.recorder import _Sleeper
from timeline.recorder_plugins import RecorderContext


def proc_records(*rows) -> bytes:
    """rows: (kind, flags, tgid, child_tgid) -> ring bytes as the proc ring holds them."""
    rec = np.zeros(len(rows), proc_ring.PROC_EVENT)
    for i, (kind, flags, tgid, child) in enumerate(rows):
        rec[i]["kind"], rec[i]["flags"], rec[i]["tgid"], rec[i]["tid"] = kind, flags, tgid, tgid
        rec[i]["child_tgid"] = rec[i]["child_tid"] = child
    return events.encode_ring_bytes(rec)


STRIDE = events.ring_stride(proc_ring.PROC_EVENT)


def ctx() -> RecorderContext:
    return RecorderContext(None, None, None, threading.Lock())


def test_forks_execs_and_exits_keep_the_set_current():
    c = ctx()
    c.add_processes([100])
    gen100 = c.processes[100]
    c.note_proc_records(proc_records(
        (proc_ring.PROC_FORK, 0, 100, 200),                   # a child process
        (proc_ring.PROC_FORK, proc_ring.PF_THREAD, 100, 100),    # a thread: no new process
        (proc_ring.PROC_RENAME, 0, 200, 0),
        (proc_ring.PROC_FORK, 0, 100, 300),
    ), STRIDE)
    assert sorted(c.processes) == [100, 200, 300] and c.processes[100] == gen100
    before = dict(c.processes)
    c.note_proc_records(proc_records(
        (proc_ring.PROC_EXEC, 0, 200, 0),                     # a new image: a new generation
        (proc_ring.PROC_EXIT, 0, 300, 0),                     # a thread of 300 ends: still alive
    ), STRIDE)
    assert sorted(c.processes) == [100, 200, 300]
    assert c.processes[200] != before[200] and c.processes[300] == before[300]
    c.note_proc_records(proc_records((proc_ring.PROC_EXIT, proc_ring.PF_GROUP_DEAD, 300, 0)), STRIDE)
    assert sorted(c.processes) == [100, 200]
    c.add_processes([300])  # learnt late (an attach snapshot taken before it exited): stays out
    assert sorted(c.processes) == [100, 200]
    c.note_proc_records(proc_records((proc_ring.PROC_FORK, 0, 200, 300)), STRIDE)  # the pid used again
    assert sorted(c.processes) == [100, 200, 300]


def test_readers_see_a_whole_snapshot():
    c = ctx()
    c.add_processes([1, 2])
    snap = c.processes
    c.note_proc_records(proc_records((proc_ring.PROC_FORK, 0, 1, 3),
                                     (proc_ring.PROC_EXIT, proc_ring.PF_GROUP_DEAD, 2, 0)), STRIDE)
    assert sorted(snap) == [1, 2] and sorted(c.processes) == [1, 3]  # replaced, not changed under a reader


def test_sleep_ends_when_the_target_exits_or_a_signal_arrives():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    got = []
    old = signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
    sleeper = _Sleeper(child.pid)
    try:
        if sleeper.pidfd is None:
            pytest.skip("no pidfd_open here (Linux < 5.3): the sleeper polls")
        t0 = time.monotonic()
        sleeper.sleep(0.2)  # nothing happens: the whole timeout
        assert time.monotonic() - t0 >= 0.2 and child.poll() is None
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        t0 = time.monotonic()
        sleeper.sleep(30)
        assert got == [signal.SIGUSR1] and time.monotonic() - t0 < 15
        threading.Timer(0.1, child.stdin.close).start()
        t0 = time.monotonic()
        sleeper.sleep(30)
        assert time.monotonic() - t0 < 15 and child.wait(5) == 0
    finally:
        sleeper.close()
        signal.signal(signal.SIGUSR1, old)
        if child.poll() is None:
            child.kill()
    assert signal.set_wakeup_fd(-1) == -1  # the previous wakeup fd (none) is back
