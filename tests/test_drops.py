"""Records lost between the BPF programs and the rings: never caused by the consumer, counted by cause."""
import subprocess
import sys
import textwrap

import pytest

from timeline import events
from timeline.bpf_session import BpfSession
from helpers import require_root

pytestmark = pytest.mark.usefixtures("root")


@pytest.fixture
def root():
    require_root()


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


def test_consumer_updates_never_make_the_kernel_refuse_a_record():
    # The kernel reads the consumer position, without a lock, on every
    # reserve.  Store it over and over (each drain, then 200 more stores
    # of the same position) while a switch storm reserves: no record may
    # be lost, although the ring (4 MiB) wraps several times, so that a
    # torn or zeroed position would read as a full ring.
    session = BpfSession(["sched"], ring_sizes={"sched": 4 << 20})
    try:
        session.attach()
        proc = subprocess.Popen([sys.executable, "-c", PINGPONG, "2.5"], stdin=subprocess.PIPE)
        session.track(proc.pid, proc.pid)  # its threads follow through tl_fork
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        reader = session.readers[events.RING_SCHED]
        while proc.poll() is None:
            reader.drain()
            pos = int(reader._cons_pos[0])
            for _ in range(200):
                reader._release(pos)
        session.detach()
        reader.drain()
        assert reader.bytes > 3 * reader.size, "the ring did not wrap: the storm was too slow to test anything"
        assert session.drops()["sched"] == [0] * session.ncpu
    finally:
        session.close()
