"""The gpu family's socket against a hostile peer in the recorded tree (issue 20): every input is bounded, and
past a bound the receiver counts it in one summary line and goes on serving (never a traceback, never unbounded
memory).  Most tests drive the receiver in-process, as tests/unit/test_gpu_receiver.py does; the last one is a real
`timeline record` whose target speaks the wire format itself through TIMELINE_GPU_SOCKET."""
from __future__ import annotations

import json
import os
import re
import resource
import socket
import types

import numpy as np
import orjson
import pytest

from helpers import REPO
from test_gpu_receiver import Sink, connect, wait_for
from timeline.gpu import plugin as gpu_plugin
from timeline.gpu import receiver as rx_mod
from timeline.gpu import records
from timeline.gpu.receiver import Receiver
from timeline.rawlog import dumps_meta

HUGE = 2 ** 64  # one past what a u64 (numpy, the raw log's JSON) can hold


def vm_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def records_message(n=2, kind=records.KERNEL) -> bytes:
    recs = np.zeros(n, records.GPU_RECORD)
    recs["kind"] = kind
    return records.encode_message(records.MSG_RECORDS, recs.tobytes())


class LogSink(Sink):
    """Serialises each META block as the raw log does, so a value it cannot hold fails here as it would there."""

    def write_meta(self, obj):
        dumps_meta(obj)
        super().write_meta(obj)


def serves_a_legitimate_client(rx) -> bool:
    """A fresh connection's records arrive: the receiver thread is alive and accepting."""
    before = sum(rx.counts.get(os.getpid(), {}).values())
    with connect(rx) as s:
        s.sendall(records_message(3))
    return rx.thread.is_alive() and wait_for(lambda: sum(rx.counts.get(os.getpid(), {}).values()) == before + 3)


@pytest.fixture
def plugin_rx():
    """A GpuPlugin whose receiver lets this process in, as before_launch would set it up."""
    plugin = gpu_plugin.GpuPlugin(types.SimpleNamespace(pid=None))
    sink = LogSink()
    plugin.receiver = Receiver(gpu_plugin._HelloTap(sink, plugin.hellos), allowed=lambda pid: pid == os.getpid())
    plugin.receiver.start()
    yield plugin, plugin.receiver, sink
    plugin.receiver.stop()


def test_every_key_the_library_sends_is_kept():
    """The known keys are the injection library's own: nothing it sends counts as past a bound."""
    def sent_keys(path, function):
        with open(os.path.join(REPO, "timeline", "gpu", "inject", path)) as f:
            body = f.read().split(function, 1)[1].split("\n}\n", 1)[0]
        return set(re.findall(r'\\"(\w+)\\":', body))
    assert sent_keys("inject.c", "tl_hello_json(char") == set(rx_mod.HELLO_KEYS)
    assert sent_keys("channel.c", "tl_channel_send_status(const") == set(rx_mod.STATUS_KEYS)


def test_oversized_integers_are_left_out(plugin_rx):
    plugin, rx, sink = plugin_rx
    with connect(rx) as s:
        s.sendall(records.encode_message(records.MSG_HELLO, json.dumps(
                      {"pid": HUGE, "cupti_version": -HUGE, "forked_from": 1e300, "active": 1, "nvtx": True,
                       "reason": "\ud800 lone surrogate"}).encode())
                  + records.encode_message(records.MSG_STATUS, b'{"cupti_dropped": %d}' % HUGE))
        # many STATUS messages at the largest accepted count: the sum saturates instead of growing past u64
        s.sendall(records.encode_message(records.MSG_STATUS, b'{"cupti_dropped": %d}' % rx_mod.MAX_INT) * 4)
    assert wait_for(lambda: sum(m["type"] == "gpu_status" for m in sink.meta) == 5)
    assert serves_a_legitimate_client(rx)
    hello = next(m for m in sink.meta if m["type"] == "gpu_hello")
    assert hello["info"] == {"nvtx": True, "reason": "\\ud800 lone surrogate"}  # the rest is out of range/type
    assert rx.stats["cupti_dropped"] == rx_mod.MAX_INT
    assert rx.bounds["fields_left_out"] == 5
    # what the recorder does with them at the end: into the raw log and the drops, which fit in a u64
    drops = plugin.drops()["gpu"]
    assert drops < 2 ** 63 and np.array([drops], dtype=np.uint64)[0] == drops
    orjson.dumps({"stats": rx.stats, "bounds": rx.bounds})
    bounds = [ln for ln in plugin.summary_lines() if "bounds" in ln]
    assert len(bounds) == 1 and "5 HELLO/STATUS field(s)" in bounds[0]


def test_unfinished_messages_are_bounded_in_total():
    """Peers that each hold an unfinished 8 MiB message: the stalest are cut once the total passes the bound."""
    sink = Sink()
    rx = Receiver(sink, allowed=lambda pid: True)
    rx.start()
    body = b"\0" * (records.MSG_MAX_LEN - records.GPU_RECORD.itemsize)  # one record short of complete
    header = records.MSG_HEADER.pack(records.MSG_RECORDS, records.MSG_MAX_LEN)
    holders = []
    try:
        base = vm_rss()
        for _ in range(40):  # 320 MiB held if nothing bounds it
            s = connect(rx)
            holders.append(s)
            try:
                s.sendall(header + body)
            except OSError:
                pass  # this one was cut while sending
        assert wait_for(lambda: rx.bounds["over_buffer"] >= 40 - rx_mod.MAX_BUFFERED_BYTES // len(body))
        grown = vm_rss() - base
        assert rx.buffered <= rx_mod.MAX_BUFFERED_BYTES + rx_mod.READ_CHUNK
        assert grown < 200 << 20, f"receiver grew by {grown >> 20} MiB"
        assert serves_a_legitimate_client(rx)
    finally:
        for s in holders:
            s.close()
        rx.stop()
    assert rx.buffered == 0


def test_hellos_keep_only_known_keys_and_sizes(plugin_rx):
    plugin, rx, sink = plugin_rx
    big_reason = "why " * (1 << 20)  # a 4 MiB HELLO: over the bound for HELLO, refused before it is buffered
    with connect(rx) as s:
        try:
            s.sendall(records.encode_message(records.MSG_HELLO, json.dumps({"reason": big_reason}).encode()))
        except OSError:
            pass
    assert wait_for(lambda: rx.stats["wire_errors"] == 1)
    base = vm_rss()
    for i in range(40):  # each just under the HELLO bound, full of keys never seen before
        junk = {f"k{i}_{j}": "v" * 40 for j in range(1000)}
        with connect(rx) as s:
            s.sendall(records.encode_message(records.MSG_HELLO, json.dumps(
                {**junk, "cuda_injection": True, "reason": "r" * 5000, "enabled": ["kernel"] * 100}).encode()))
    assert wait_for(lambda: sum(m["type"] == "gpu_hello" for m in sink.meta) == 40)
    assert vm_rss() - base < 50 << 20
    (kept,) = plugin.hellos.values()  # all from this process
    assert set(kept) == {"cuda_injection", "reason", "enabled"}
    assert len(kept["reason"]) == rx_mod.MAX_TEXT_CHARS and len(kept["enabled"]) == rx_mod.MAX_LIST_ITEMS
    assert all(len(dumps_meta(m)) < 8 << 10 for m in sink.meta)
    assert rx.bounds["fields_left_out"] == 40 * (1000 + 100 - rx_mod.MAX_LIST_ITEMS)
    assert serves_a_legitimate_client(rx)


def test_long_hello_reason_gives_a_short_summary_line(plugin_rx):
    plugin, rx, _ = plugin_rx
    pid = os.getpid()
    with connect(rx) as s:
        s.sendall(records.encode_message(records.MSG_HELLO, json.dumps(
            {"cuda_injection": True, "active": False,
             "reason": "no libcupti\ngpu: pid 1: forged line" + "x" * 60000}).encode()))
    assert wait_for(lambda: pid in plugin.hellos)
    rx.stop()
    lines = plugin.summary_lines()
    (line,) = [ln for ln in lines if ln.startswith(f"gpu: pid {pid}:")]
    assert "no GPU activity recorded: no libcupti?gpu: pid 1: forged line" in line
    assert len(line) < 300 and all("\n" not in ln and len(ln) < 400 for ln in lines)


def test_connections_past_the_cap_are_closed_and_counted():
    sink = Sink()
    rx = Receiver(sink, allowed=lambda pid: True, max_connections=16)
    rx.start()
    held = []
    try:
        held = [connect(rx) for _ in range(40)]
        assert wait_for(lambda: rx.bounds["over_connections"] == 24)
        assert rx.open_connections == 16
        closed = 0
        for s in held:  # the extras were closed at once: EOF; the others wait for data
            try:
                closed += s.recv(1, socket.MSG_DONTWAIT) == b""
            except ConnectionResetError:
                closed += 1
            except BlockingIOError:
                pass
        assert closed == 24
        for s in held:
            s.close()
        assert wait_for(lambda: rx.open_connections == 0)
        assert serves_a_legitimate_client(rx)
    finally:
        for s in held:
            s.close()
        rx.stop()
    line = gpu_plugin.bounds_line(rx.bounds, rx.max_connections)
    assert "24 connection(s) closed past 16 open at once" in line


def test_connection_cap_stays_under_the_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))
        rx = Receiver(Sink(), allowed=lambda pid: True)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert rx.max_connections == 100
    rx.listener.close()


def test_out_of_file_descriptors_at_accept_pauses_then_serves():
    sink = Sink()
    rx = Receiver(sink, allowed=lambda pid: True)
    rx.start()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    clients = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(40)]
    try:
        # a few descriptors left: the receiver's accepts run out (the clients already hold theirs)
        used = {int(fd) for fd in os.listdir("/proc/self/fd")}
        free = [fd for fd in range(len(used) + 4) if fd not in used]
        resource.setrlimit(resource.RLIMIT_NOFILE, (free[3], hard))  # room for 3 more at most
        for c in clients:
            c.connect("\0" + rx.socket_name)  # queued in the backlog; accept() is what needs a descriptor
        assert wait_for(lambda: rx.bounds["accept_failed"] >= 2)  # paused, tried again, still none
        assert rx.thread.is_alive()
        for c in clients:
            c.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert serves_a_legitimate_client(rx)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for c in clients:
            c.close()
        rx.stop()
    assert "pause(s) accepting for lack of file descriptors" in gpu_plugin.bounds_line(rx.bounds, 1)


def test_a_failure_handling_one_peer_ends_only_that_connection():
    class FailingOnce(Sink):
        failed = False

        def write_ring(self, ring, data):
            if not self.failed:
                self.failed = True
                raise RuntimeError("disk trouble")
            super().write_ring(ring, data)

    sink = FailingOnce()
    rx = Receiver(sink, allowed=lambda pid: pid == os.getpid())
    rx.start()
    try:
        with connect(rx) as s:
            s.sendall(records_message(1))
            assert wait_for(lambda: rx.bounds["errors"] == 1)
        assert serves_a_legitimate_client(rx) and serves_a_legitimate_client(rx)
    finally:
        rx.stop()
    notes = [m for m in sink.meta if m["type"] == "gpu_receiver_error"]
    assert len(notes) == 1 and "disk trouble" in notes[0]["error"]
