"""The gpu family's socket receiver: records stored as ring 7 with the peer's pid, hostile peers contained."""
import os
import socket
import threading
import time

import numpy as np

from timeline import events
from timeline.gpu import records
from timeline.gpu.receiver import Receiver


class Sink:
    def __init__(self):
        self.rings, self.meta, self.lock = [], [], threading.Lock()

    def write_ring(self, ring, data):
        with self.lock:
            self.rings.append((ring, data))

    def write_meta(self, obj):
        with self.lock:
            self.meta.append(obj)


def connect(rx):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + rx.socket_name)
    return s


def wait_for(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        time.sleep(0.01)
    return cond()


def test_records_stored_with_peer_pid_and_hostile_peer_contained():
    sink = Sink()
    rx = Receiver(sink, allowed=lambda pid: pid == os.getpid())
    rx.start()
    try:
        recs = np.zeros(4, records.GPU_RECORD)
        recs["kind"] = [records.KERNEL, records.KERNEL, records.MEMCPY, records.API]
        recs["pid"] = 12345  # a lie the receiver must overwrite
        recs["start"] = [100, 200, 300, 400]
        good = connect(rx)
        good.sendall(records.encode_message(records.MSG_HELLO, b'{"cupti_path": "/x/libcupti.so.12"}')
                     + records.encode_message(records.MSG_STRINGS, records.encode_strings({1: "_Z3addPfS_"})))
        bad = connect(rx)
        bad.sendall(records.MSG_HEADER.pack(77, 4) + b"junk")  # unknown type: this connection ends
        assert wait_for(lambda: rx.stats["wire_errors"] == 1)
        try:
            assert bad.recv(1) == b""  # closed by the receiver
        except ConnectionResetError:
            pass
        # the good connection still works after the hostile one ended
        good.sendall(records.encode_message(records.MSG_RECORDS, recs.tobytes())
                     + records.encode_message(records.MSG_STATUS, b'{"cupti_dropped": 3}'))
        good.close()
        assert wait_for(lambda: any(m["type"] == "gpu_status" for m in sink.meta))
    finally:
        rx.stop()
    (ring, data), = sink.rings
    assert ring == records.RING_GPU
    got = events.decode_ring_bytes(data, records.GPU_RECORD)
    assert list(got["pid"]) == [os.getpid()] * 4 and list(got["start"]) == [100, 200, 300, 400]
    assert rx.counts == {os.getpid(): {"kernel": 2, "memcpy": 1, "api": 1}}
    assert rx.stats["cupti_dropped"] == 3
    strings = next(m for m in sink.meta if m["type"] == "gpu_strings")
    assert strings["strings"] == {"1": "_Z3addPfS_"}
    hello = next(m for m in sink.meta if m["type"] == "gpu_hello")
    assert hello["info"] == {"cupti_path": "/x/libcupti.so.12"}


def test_peer_outside_the_tree_is_refused():
    sink = Sink()
    rx = Receiver(sink, allowed=lambda pid: False)
    rx.start()
    try:
        s = connect(rx)
        try:
            s.sendall(records.encode_message(records.MSG_RECORDS, bytes(128)))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before our bytes went out
        assert wait_for(lambda: rx.stats["refused"] == 1)
        try:
            assert s.recv(1) == b""  # closed by the receiver (EOF, or a reset: it left our bytes unread)
        except ConnectionResetError:
            pass
    finally:
        rx.stop()
    assert sink.rings == [] and sink.meta == []
