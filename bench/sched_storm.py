"""A context-switch storm: two threads ping-pong one byte over two pipes.

    python bench/sched_storm.py [SECONDS]

Each round trip is 2+ context switches and wakeups on a 2-core machine, so
recording it shows how many scheduler events per second timeline drains
without loss:  sudo timeline record -o storm.pftrace -- python bench/sched_storm.py 3
"""
import os
import sys
import threading
import time


def main() -> None:
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()

    def pong():
        while os.read(r1, 1) != b"q":
            os.write(w2, b"x")

    t = threading.Thread(target=pong)
    t.start()
    n, end = 0, time.time() + secs
    while time.time() < end:
        os.write(w1, b"x")
        os.read(r2, 1)
        n += 1
    os.write(w1, b"q")
    t.join()
    print(f"{n / secs:,.0f} round trips/s")


if __name__ == "__main__":
    main()
