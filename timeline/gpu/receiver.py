"""Recorder side of the gpu family's socket: accepts the injection library's connections and stores what they send.

Started by the family's recorder plugin (plugin.py) before the target launches; its abstract socket name goes
into the target's TIMELINE_GPU_SOCKET.
Every byte from a peer is hostile: a peer outside the recorded tree is refused, a broken message ends only that
peer's connection, and whatever a peer holds is bounded (the constants below). Past a bound the receiver counts
(`bounds`, one summary line) and goes on; nothing a peer sends ends the receiver thread.
"""
import errno
import json
import os
import resource
import selectors
import socket
import struct
import threading
import time

import numpy as np

from timeline import events
from timeline.gpu import records

# Legitimate use is far inside each bound: one connection per CUDA/NVTX process (torchrun: 64 ranks per machine,
# plus DataLoader workers that call NVTX), records messages of at most 512 KiB (CUPTI batches of 4096 records;
# NVTX batches are 32 KiB), a HELLO under 8 KiB, one STATUS per process.
MAX_CONNECTIONS = 512          # open at once (and at most half the fd limit); more are closed at accept
MAX_BUFFERED_BYTES = 64 << 20  # unfinished messages across all connections; past it the stalest is cut
MAX_CONTROL_MESSAGES = 64      # HELLO + STATUS per connection (the library sends at most 3); more are ignored
MAX_TEXT_CHARS = 1024          # a string kept from HELLO/STATUS (the library's own buffers hold this much)
MAX_LIST_ITEMS = 32            # HELLO's "enabled" list (the library enables 6 kinds)
MIN_INT, MAX_INT = -(1 << 31), (1 << 53) - 1  # any number taken from a message; counts saturate at MAX_INT
MAX_PIDS = 4096                # processes counted one by one; records of more are summed together
MAX_ERROR_NOTES = 16           # malformed-message notes written to the raw log; later ones are only counted
ACCEPT_BACKOFF_S = 0.1         # out of file descriptors: stop accepting for this long, then try again
READ_CHUNK = 1 << 20

_BOOL, _INT, _TEXT, _TEXTS = "bool", "int", "text", "texts"
# What the library's HELLO and STATUS carry (inject.c tl_hello_json, channel.c tl_channel_send_status);
# other keys are left out.
HELLO_KEYS = {"library": _TEXT, "pid": _INT, "forked_from": _INT, "cuda_injection": _BOOL, "active": _BOOL,
              "reason": _TEXT, "cupti_path": _TEXT, "cupti_version": _INT, "record_layout": _INT,
              "runtime_major": _INT, "enabled": _TEXTS, "nvtx": _BOOL, "clock": _TEXT, "record_size": _INT,
              "cupti_preloaded": _TEXT}
STATUS_KEYS = {"when": _TEXT, "records_sent": _INT, "records_lost": _INT, "buffers_lost": _INT,
               "cupti_dropped": _INT, "cupti_buffers": _INT, "nvtx_records": _INT, "pid": _INT}

# What went past a bound, counted (plugin.py turns the non-zero ones into one summary line).
BOUND_COUNTERS = ("over_connections", "accept_failed", "over_buffer", "control_ignored", "fields_left_out",
                  "texts_cut", "other_pids", "errors")

_UCRED = struct.Struct("3i")


class Receiver:
    def __init__(self, sink, allowed, max_connections=MAX_CONNECTIONS, max_buffered=MAX_BUFFERED_BYTES):
        """sink: write_ring(ring, bytes) and write_meta(dict) (a RecorderContext).
        allowed(pid) -> bool: whether pid belongs to the recorded tree."""
        self.sink, self.allowed = sink, allowed
        self.max_connections = _connection_cap(max_connections)
        self.max_buffered = max_buffered
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
        self.bounds = dict.fromkeys(BOUND_COUNTERS, 0)
        self.counts: dict[int, dict[str, int]] = {}  # pid -> record kind name -> count
        self.other_counts: dict[str, int] = {}       # the same, summed, for processes past MAX_PIDS
        self.open_connections = 0
        self.buffered = 0          # bytes of unfinished messages, all connections together
        self._reads = 0            # recv calls so far: orders connections by their last progress
        self._accept_paused_until = 0.0
        self._error_noted = False
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
                # Blocks until a peer or stop() says something (or a paused accept may resume);
                # once stopping, polls what is left without waiting.
                ready = self.sel.select(self._select_timeout())
                self._resume_accept()
                for key, _ in ready:
                    if key.data == "wake":
                        try:
                            self._wake_r.recv(64)
                        except OSError:
                            pass
                        continue
                    try:
                        if key.data is None:
                            self._accept()
                        else:
                            self._read(key.fileobj, key.data)
                    except Exception as e:  # noqa: BLE001 - nothing a peer sends may end the receiver
                        self._internal_error(key, e)
                if self._stop.is_set() and (not ready or time.monotonic() > self._deadline):
                    break
        finally:
            for key in list(self.sel.get_map().values()):
                if isinstance(key.data, dict):
                    self._close(key.fileobj, key.data)
            self._wake_r.close()
            self.sel.close()
            self.listener.close()

    def _select_timeout(self):
        if self._stop.is_set():
            return 0
        if self._accept_paused_until:
            return max(0.0, self._accept_paused_until - time.monotonic())
        return None

    # -- connections ------------------------------------------------------
    def _accept(self):
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            if e.errno == errno.ECONNABORTED:
                return
            # EMFILE/ENFILE/ENOBUFS: the connection stays queued and the listener stays readable;
            # pause accepting rather than spin on it.
            self.bounds["accept_failed"] += 1
            self._pause_accept()
            return
        try:
            pid, _uid, _gid = _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
            if not self.allowed(pid):
                self.stats["refused"] += 1
                conn.close()
                return
            if self.open_connections >= self.max_connections:
                self.bounds["over_connections"] += 1
                conn.close()
                return
            conn.setblocking(False)
            self.sel.register(conn, selectors.EVENT_READ,
                              {"pid": pid, "reader": records.MessageReader(), "counted": 0, "control": 0,
                               "progress": 0})
        except Exception:
            conn.close()
            raise
        self.open_connections += 1

    def _pause_accept(self):
        if not self._accept_paused_until:
            self.sel.unregister(self.listener)
        self._accept_paused_until = time.monotonic() + ACCEPT_BACKOFF_S

    def _resume_accept(self):
        if self._accept_paused_until and time.monotonic() >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self.sel.register(self.listener, selectors.EVENT_READ, None)

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
        self._reads += 1
        state["progress"] = self._reads
        try:
            messages = state["reader"].feed(data)
        except records.WireError as e:
            self.stats["wire_errors"] += 1
            if self.stats["wire_errors"] <= MAX_ERROR_NOTES:
                self.sink.write_meta({"type": "gpu_wire_error", "pid": state["pid"], "error": str(e)[:200]})
            self._discard(state)
            self._close(conn, state)
            return
        pending = state["reader"].pending
        self.buffered += pending - state["counted"]
        state["counted"] = pending
        for mtype, payload in messages:
            self._handle(state, mtype, payload)
        self._keep_within_budget()

    def _keep_within_budget(self):
        """Past the total for unfinished messages, cut the connections whose messages moved least recently:
        the library sends each message whole, so a stalled one is not the library's."""
        while self.buffered > self.max_buffered:
            holding = [k for k in self.sel.get_map().values()
                       if isinstance(k.data, dict) and k.data["counted"]]
            if not holding:
                self.buffered = 0
                return
            stalest = min(holding, key=lambda k: k.data["progress"])
            self.bounds["over_buffer"] += 1
            self._discard(stalest.data)
            self._close(stalest.fileobj, stalest.data)

    def _discard(self, state):
        """Drops a connection's unfinished message (state["counted"]: how much of it self.buffered holds)."""
        self.buffered -= state["counted"]
        state["counted"] = 0
        state["reader"].buf = bytearray()  # frees the storage (clear() may keep it)

    def _close(self, conn, state):
        if state["reader"].pending:
            self.stats["cut_short"] += 1
        self._discard(state)
        try:
            self.sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        else:
            self.open_connections -= 1
        conn.close()

    def _internal_error(self, key, error):
        """A failure handling one peer: that connection ends, the first such failure is noted in the log."""
        self.bounds["errors"] += 1
        if isinstance(key.data, dict):
            try:
                self._close(key.fileobj, key.data)
            except Exception:  # noqa: BLE001 - already failing; the connection is gone either way
                pass
        elif key.data is None:
            self._pause_accept()
        if not self._error_noted:
            self._error_noted = True
            try:
                self.sink.write_meta({"type": "gpu_receiver_error", "error": repr(error)[:200]})
            except Exception:  # noqa: BLE001 - the note is best effort
                pass

    # -- messages ---------------------------------------------------------
    def _handle(self, state, mtype, payload):
        pid = state["pid"]
        if mtype == records.MSG_RECORDS:
            recs = records.parse_records(payload, pid=pid)
            self.sink.write_ring(records.RING_GPU, events.encode_ring_bytes(recs))
            per = self._counts_of(pid)
            kinds, n = np.unique(recs["kind"], return_counts=True)
            for k, c in zip(kinds.tolist(), n.tolist()):
                name = records.KIND_NAMES.get(k, "unknown kind")
                per[name] = per.get(name, 0) + c
        elif mtype == records.MSG_STRINGS:
            self.sink.write_meta({"type": "gpu_strings", "pid": pid,
                                  "strings": {str(k): v for k, v in records.parse_strings(payload).items()}})
        else:
            state["control"] += 1
            if state["control"] > MAX_CONTROL_MESSAGES:
                self.bounds["control_ignored"] += 1
                return
            hello = mtype == records.MSG_HELLO
            info, left_out, cut = clean_info(payload, HELLO_KEYS if hello else STATUS_KEYS)
            self.bounds["fields_left_out"] += left_out
            self.bounds["texts_cut"] += cut
            if not hello:
                dropped = info.get("cupti_dropped", 0)
                if dropped > 0:
                    self.stats["cupti_dropped"] = min(MAX_INT, self.stats["cupti_dropped"] + dropped)
            self.sink.write_meta({"type": "gpu_hello" if hello else "gpu_status", "pid": pid, "info": info})

    def _counts_of(self, pid):
        if pid in self.counts or len(self.counts) < MAX_PIDS:
            return self.counts.setdefault(pid, {})
        self.bounds["other_pids"] += 1
        return self.other_counts


def _connection_cap(wanted):
    """At most half the file descriptors this process may open: the rest of the recorder needs its own."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft // 2))


def clean_info(payload, keys):
    """HELLO/STATUS payload -> (info, left_out, cut): the known `keys` whose values have the expected type and
    range, strings cut to MAX_TEXT_CHARS; left_out counts what was not kept, cut the strings shortened.
    A payload that is not a JSON object is kept as a short "unparsed" string."""
    try:
        obj = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        obj = None
    if not isinstance(obj, dict):
        return {"unparsed": _text(payload[:200].decode("utf-8", "replace"))}, 1, 0
    info, left_out, cut = {}, 0, 0
    for key, value in obj.items():
        kind = keys.get(key)
        if kind == _BOOL and type(value) is bool:
            info[key] = value
        elif kind == _INT and type(value) is int and MIN_INT <= value <= MAX_INT:
            info[key] = value
        elif kind == _TEXT and isinstance(value, str):
            info[key] = _text(value)
            cut += len(value) > MAX_TEXT_CHARS
        elif kind == _TEXTS and isinstance(value, list):
            texts = [x for x in value if isinstance(x, str)]
            info[key] = [_text(x) for x in texts[:MAX_LIST_ITEMS]]
            left_out += len(value) - len(info[key])
            cut += sum(len(x) > MAX_TEXT_CHARS for x in texts[:MAX_LIST_ITEMS])
        else:
            left_out += 1
    return info, left_out, cut


def _text(s):
    """At most MAX_TEXT_CHARS, valid UTF-8 (a lone surrogate from a JSON escape becomes a literal \\udXXX)."""
    return s[:MAX_TEXT_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")
