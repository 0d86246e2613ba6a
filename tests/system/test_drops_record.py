"""Records lost between the BPF programs and the rings, in real recordings: never
caused by the consumer, counted by cause. The summary text: tests/unit/test_drops.py.
"""
import os
import subprocess
import sys
import textwrap

import pytest

from timeline import sched_records
from timeline.bpf_session import BpfSession


# Two threads ping-pong a byte over pipes for argv[1] seconds, after a line on stdin.
PINGPONG = textwrap.dedent("""
    import os, sys, threading, time
    sys.stdin.readline()
    r1, w1 = os.pipe(); r2, w2 = os.pipe()
    def pong():
        while os.read(r1, 1) != b"q": os.write(w2, b"x")
    t = threading.Thread(target=pong); t.start()
    end = time.time() + float(sys.argv[1])
    while time.time() < end:
        os.write(w1, b"x"); os.read(r2, 1)
    os.write(w1, b"q"); t.join()
""")


def _storm(session, seconds, between_drains):
    """Run PINGPONG under `session`, draining the sched ring until it exits.

    The storm runs on CPU 1 and the drain loop on CPU 0, so that the kernel
    reserves records while user space writes the consumer position."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    proc = subprocess.Popen([sys.executable, "-c", PINGPONG, str(seconds)], stdin=subprocess.PIPE)
    mine = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(proc.pid, {1})  # its threads, created after "go", inherit it
        os.sched_setaffinity(0, {0})
        session.track(proc.pid, proc.pid)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        reader = session.readers[sched_records.RING_SCHED]
        while proc.poll() is None:
            reader.drain()
            between_drains(reader)
    finally:
        os.sched_setaffinity(0, mine)
        proc.kill()
        proc.wait()
    session.detach()
    reader.drain()
    return reader


def test_consumer_updates_never_make_the_kernel_refuse_a_record(root):
    # The kernel reads the consumer position, without a lock, on every
    # reserve.  Store it over and over (each drain, then 200 more stores
    # of the same position) while a switch storm reserves: no reserve may
    # fail, although the ring (4 MiB) wraps several times, so that a torn or
    # zeroed position would read as a full ring.
    def restore(reader):
        pos = int(reader._cons_pos[0])
        for _ in range(200):
            reader._release(pos)

    session = BpfSession(["sched"], ring_sizes={"sched": 4 << 20})
    try:
        session.attach()
        reader = _storm(session, 2.5, restore)
        assert reader.bytes > 3 * reader.size, "the ring did not wrap: the storm was too slow to test anything"
        causes = session.drop_causes()["sched"]
        assert causes["full"] == causes["refused"] == causes["retried"] == [0] * session.ncpu
    finally:
        session.close()


def test_a_reserve_refused_with_room_left_is_retried_and_counted(root):
    # Fault injection: the consumer position reads 0 for a moment, over and
    # over (what a torn store did).  A reserve landing in such a moment is
    # refused although the ring is nearly empty; the retry keeps the record
    # and counts it as retried, not lost.
    def zero_blips(reader):
        pos = int(reader._cons_pos[0])
        for _ in range(200):
            reader._cons_pos[0] = 0
            reader._cons_pos[0] = pos

    session = BpfSession(["sched"], ring_sizes={"sched": 1 << 20})
    try:
        session.attach()
        reader = _storm(session, 2.0, zero_blips)
        causes = session.drop_causes()["sched"]
        assert reader.bytes > 3 * reader.size
        assert sum(causes["retried"]) > 0
    finally:
        session.close()
