"""Receives on loopback TCP that block for known times, for tests/system/test_net_recv.py.

    python net_recv_job.py

Each case runs on its own thread (named recv-<case>), one after the other, against a peer thread
of this process; prints one JSON line: case -> {tid, local, peer, bytes,
calls: [seconds each recv() took, measured around it]}.  A peer waits until
the receiver is inside recvfrom (its /proc/self/task/<tid>/syscall says 45,
x86-64's recvfrom: what recv() is there) before it starts its delay, so a
blocking receive lasts at least the delay however late the receiver ran.

    blocked    peer sends 1234 bytes 300 ms after the receiver blocked
    medium     the same after 30 ms (100 bytes)
    short      three receives, each answered as soon as the peer sees it wait
    immediate  the data is there before recv() is called
    nonblock   20 non-blocking receives on an idle connection (EAGAIN)
    polled     waits in select() on a non-blocking socket until the peer has queued megabytes, then
               one recv() that takes them: long (copying; milliseconds here) but not waiting
    highfd     like medium, on a socket that was non-blocking and is blocking again, at a high fd
               (past the task's first fd table)
"""
import json
import mmap
import os
import resource
import select
import socket
import threading
import time

NR_RECVFROM = 45
NR_POLL, NR_SELECT, NR_PSELECT6, NR_PPOLL = 7, 23, 270, 271  # x86-64


def pair():
    """A connected loopback TCP pair: (receiver's socket, peer's socket)."""
    lst = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(lst.getsockname())
    b, _ = lst.accept()
    lst.close()
    return a, b


def wait_in_syscall(tid: int, nrs) -> None:
    while True:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            if f.read().split(" ", 1)[0] in {str(nr) for nr in nrs}:
                return
        time.sleep(0.0005)


def wait_in_recv(tid: int) -> None:
    wait_in_syscall(tid, (NR_RECVFROM,))


def timed_recv(sock, calls: list, n: int = 4096, into=None) -> int:
    t0 = time.monotonic()
    try:
        return sock.recv_into(into) if into is not None else len(sock.recv(n))
    except BlockingIOError:
        return -1
    finally:
        calls.append(time.monotonic() - t0)


def fill(sock) -> int:
    """Send until the connection's buffers are full; bytes sent."""
    sock.setblocking(False)
    sent = 0
    try:
        while True:
            sent += sock.send(b"z" * 65536)
    except BlockingIOError:
        return sent


def high_fd(sock):
    """The same socket (a dup) at an fd past the first fd table (64 entries)."""
    fd = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 1, 500)
    os.dup2(sock.fileno(), fd)
    return socket.socket(fileno=fd)


def run_case(name: str, out: dict) -> None:
    a, b = pair()
    if name == "polled":  # room for megabytes in one receive
        a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    if name == "highfd":
        a.setblocking(False)  # the file's O_NONBLOCK on, then off again
        a.setblocking(True)
        a = high_fd(a)
    filled = threading.Event()
    info = {"local": "%s:%d" % a.getsockname(), "peer": "%s:%d" % a.getpeername(), "calls": [], "bytes": []}
    ready = threading.Event()

    def receiver():
        info["tid"] = threading.get_native_id()
        with open(f"/proc/self/task/{info['tid']}/comm", "w") as f:  # the thread's name in the trace
            f.write(f"recv-{name}")
        ready.set()
        if name == "nonblock":
            a.setblocking(False)
            for _ in range(20):
                info["bytes"].append(timed_recv(a, info["calls"]))
                time.sleep(0.002)
            return
        if name == "polled":
            a.setblocking(False)
            select.select([a], [], [], 10)
            filled.wait(10)
            buf = mmap.mmap(-1, 16 << 20)  # fresh pages: the copy faults them in, slower still
            info["bytes"].append(timed_recv(a, info["calls"], into=buf))
            return
        if name == "immediate":
            select.select([a], [], [], 10)
        for _ in range(3 if name == "short" else 1):
            info["bytes"].append(timed_recv(a, info["calls"]))

    t = threading.Thread(target=receiver, name=f"recv-{name}")
    t.start()
    ready.wait()
    if name == "immediate":
        b.sendall(b"x" * 10)
    elif name in ("blocked", "medium", "highfd"):
        wait_in_recv(info["tid"])
        time.sleep(0.3 if name == "blocked" else 0.03)
        b.sendall(b"x" * (1234 if name == "blocked" else 100))
    elif name == "polled":
        wait_in_syscall(info["tid"], (NR_POLL, NR_SELECT, NR_PSELECT6, NR_PPOLL))
        time.sleep(0.03)
        info["sent"] = fill(b)
        filled.set()
    elif name == "short":
        for _ in range(3):
            wait_in_recv(info["tid"])
            b.sendall(b"y")
            while len(info["bytes"]) < _ + 1 and t.is_alive():
                time.sleep(0.0005)
    t.join()
    a.close()
    b.close()
    out[name] = info


def main() -> None:
    out: dict = {}
    for name in ("blocked", "medium", "short", "immediate", "nonblock", "polled", "highfd"):
        run_case(name, out)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
