"""Recorder side of the gpu family's socket: accepts the injection library's connections and stores what they send.

Started by the family's recorder plugin (plugin.py) before the target launches; its abstract socket name goes
into the target's TIMELINE_GPU_SOCKET.
Every byte from a peer is hostile: a peer outside the recorded tree is refused, and a broken message ends
only that peer's connection, never the recording.
"""
import json
import os
import selectors
import socket
import struct
import threading
import time

import numpy as np

from timeline import events
from timeline.gpu import records

_UCRED = struct.Struct("3i")
READ_CHUNK = 1 << 20


class Receiver:
    def __init__(self, sink, allowed):
        """sink: write_ring(ring, bytes) and write_meta(dict) (a RecorderContext).
        allowed(pid) -> bool: whether pid belongs to the recorded tree."""
        self.sink, self.allowed = sink, allowed
        self.socket_name = "timeline-gpu-" + os.urandom(8).hex()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.listener.bind("\0" + self.socket_name)  # abstract: nothing on disk to clean up or race on
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        # stop() wakes the loop through this pair: no periodic wake-ups while idle
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.stats = {"refused": 0, "wire_errors": 0, "cut_short": 0, "cupti_dropped": 0}
        self.counts: dict[int, dict[str, int]] = {}  # pid -> record kind name -> count
        self._stop = threading.Event()
        self._deadline = float("inf")
        self.thread = threading.Thread(target=self._run, name="timeline-gpu-receiver", daemon=True)

    def start(self):
        self.thread.start()

    def stop(self, timeout=2.0):
        """Drains what peers already sent (for at most `timeout`: a peer that keeps sending must not
        hold the recording open), then closes everything; nothing is written after this returns."""
        self._deadline = time.monotonic() + timeout
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self.thread.join(timeout + 1.0)
        self._wake_w.close()

    def _run(self):
        try:
            while True:
                # Blocks until a peer or stop() says something; once stopping,
                # polls what is left without waiting.
                ready = self.sel.select(0 if self._stop.is_set() else None)
                for key, _ in ready:
                    if key.data == "wake":
                        try:
                            self._wake_r.recv(64)
                        except OSError:
                            pass
                        continue
                    if key.data is None:
                        self._accept()
                    else:
                        self._read(key.fileobj, key.data)
                if self._stop.is_set() and (not ready or time.monotonic() > self._deadline):
                    break
        finally:
            for key in list(self.sel.get_map().values()):
                if isinstance(key.data, dict):
                    self._close(key.fileobj, key.data)
            self._wake_r.close()
            self.sel.close()
            self.listener.close()

    def _accept(self):
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        pid, _uid, _gid = _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
        if not self.allowed(pid):
            self.stats["refused"] += 1
            conn.close()
            return
        conn.setblocking(False)
        self.sel.register(conn, selectors.EVENT_READ, {"pid": pid, "reader": records.MessageReader()})

    def _read(self, conn, state):
        try:
            data = conn.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn, state)
            return
        try:
            for mtype, payload in state["reader"].feed(data):
                self._handle(state["pid"], mtype, payload)
        except records.WireError as e:
            self.stats["wire_errors"] += 1
            self.sink.write_meta({"type": "gpu_wire_error", "pid": state["pid"], "error": str(e)[:200]})
            state["reader"].buf.clear()
            self._close(conn, state)

    def _handle(self, pid, mtype, payload):
        if mtype == records.MSG_RECORDS:
            recs = records.parse_records(payload, pid=pid)
            self.sink.write_ring(records.RING_GPU, events.encode_ring_bytes(recs))
            per = self.counts.setdefault(pid, {})
            kinds, n = np.unique(recs["kind"], return_counts=True)
            for k, c in zip(kinds.tolist(), n.tolist()):
                name = records.KIND_NAMES.get(k, f"kind{k}")
                per[name] = per.get(name, 0) + c
        elif mtype == records.MSG_STRINGS:
            self.sink.write_meta({"type": "gpu_strings", "pid": pid,
                                  "strings": {str(k): v for k, v in records.parse_strings(payload).items()}})
        else:
            info = _json_object(payload)
            if mtype == records.MSG_STATUS:
                dropped = info.get("cupti_dropped", 0)
                if isinstance(dropped, int) and dropped > 0:
                    self.stats["cupti_dropped"] += dropped
            self.sink.write_meta({"type": "gpu_hello" if mtype == records.MSG_HELLO else "gpu_status",
                                  "pid": pid, "info": info})

    def _close(self, conn, state):
        if state["reader"].pending:
            self.stats["cut_short"] += 1
        try:
            self.sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()


def _json_object(payload):
    """HELLO/STATUS payload -> dict; anything that is not a JSON object is kept as a bounded string."""
    try:
        obj = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        obj = None
    return obj if isinstance(obj, dict) else {"unparsed": payload[:512].decode("utf-8", "replace")}
