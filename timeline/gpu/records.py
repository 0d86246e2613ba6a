"""Python mirror of timeline/gpu/records.h: the record layout stored in ring 7 and the socket wire format.

records.h is the one definition; tests/unit/test_gpu_records.py compiles it and checks this mirror agrees.
The wire parsers here treat every byte as hostile: each length is bounded before anything is read.
"""
import enum
import struct

import numpy as np

RING_GPU = 7

MSG_HELLO, MSG_RECORDS, MSG_STRINGS, MSG_STATUS = 1, 2, 3, 4
MSG_TYPES = (MSG_HELLO, MSG_RECORDS, MSG_STRINGS, MSG_STATUS)
MSG_MAX_LEN = 8 << 20
# HELLO and STATUS are small JSON objects (the library's are under 8 KiB and 1 KiB): a larger one is not
# the library's, and is refused before it is buffered.
CONTROL_MAX_LEN = 64 << 10
CONTROL_TYPES = (MSG_HELLO, MSG_STATUS)
MSG_HEADER = struct.Struct("<II")

KERNEL, MEMCPY, MEMSET, API, NVTX, SYNC = 1, 2, 3, 4, 5, 6
KIND_NAMES = {KERNEL: "kernel", MEMCPY: "memcpy", MEMSET: "memset", API: "api", NVTX: "nvtx", SYNC: "sync"}


class GpuKind(enum.IntEnum):
    """The `kind` field's values, named as the recorder's summary names them."""
    gpu_kernel = KERNEL
    gpu_memcpy = MEMCPY
    gpu_memset = MEMSET
    gpu_api = API
    nvtx_range = NVTX
    gpu_sync = SYNC


GF_DRIVER, GF_GRAPH, GF_PEER, GF_OPEN = 1, 2, 4, 8

# CUpti_ActivityMemcpyKind values as CUPTI documents them.
COPY_KINDS = {0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
              8: "DtoD", 9: "HtoH", 10: "PtoP"}

GPU_RECORD = np.dtype([
    ("start", "<u8"), ("end", "<u8"), ("bytes", "<u8"), ("graph_node", "<u8"),
    ("correlation", "<u4"), ("pid", "<u4"), ("tid", "<u4"), ("device", "<u4"),
    ("context", "<u4"), ("stream", "<u4"), ("name", "<u4"), ("domain", "<u4"),
    ("grid", "<u4", (3,)), ("block", "<u4", (3,)),
    ("registers", "<u4"), ("static_smem", "<u4"), ("dynamic_smem", "<u4"), ("graph_id", "<u4"),
    ("kind", "<u2"), ("flags", "<u2"),
    ("copy_kind", "u1"), ("src_kind", "u1"), ("dst_kind", "u1"), ("sync_kind", "u1"),
    ("value", "<u4"), ("src_device", "<u4"), ("dst_device", "<u4"), ("pad", "<u4"),
])
assert GPU_RECORD.itemsize == 128

STRING_ENTRY = struct.Struct("<II")


class WireError(ValueError):
    """The peer broke the wire format; the connection is closed, recording goes on."""


class MessageReader:
    """Splits a byte stream into (type, payload) messages, bounding every length before buffering it."""

    def __init__(self, max_len=MSG_MAX_LEN, control_max_len=CONTROL_MAX_LEN):
        self.max_len, self.control_max_len = max_len, control_max_len
        self.buf = bytearray()

    def feed(self, data):
        self.buf += data
        out = []
        while len(self.buf) >= MSG_HEADER.size:
            mtype, length = MSG_HEADER.unpack_from(self.buf)
            if mtype not in MSG_TYPES:
                raise WireError(f"unknown message type {mtype}")
            limit = self.control_max_len if mtype in CONTROL_TYPES else self.max_len
            if length > limit:
                raise WireError(f"message of {length} bytes exceeds {limit}")
            if mtype == MSG_RECORDS and length % GPU_RECORD.itemsize:
                raise WireError(f"records payload of {length} bytes is not whole records")
            end = MSG_HEADER.size + length
            if len(self.buf) < end:
                break
            out.append((mtype, bytes(self.buf[MSG_HEADER.size:end])))
            del self.buf[:end]
        return out

    @property
    def pending(self):
        """Bytes of a message cut short (non-zero when the peer closes mid-message)."""
        return len(self.buf)


def parse_records(payload, pid=None):
    """RECORDS payload -> structured array; `pid` (the peer's SO_PEERCRED pid) overwrites what the sender claims."""
    recs = np.frombuffer(payload, dtype=GPU_RECORD).copy()
    if pid is not None:
        recs["pid"] = pid
    return recs


def parse_strings(payload):
    """STRINGS payload -> {id: text}; an entry running past the payload is a WireError."""
    out, off, n = {}, 0, len(payload)
    while off < n:
        if n - off < STRING_ENTRY.size:
            raise WireError("truncated string entry header")
        sid, length = STRING_ENTRY.unpack_from(payload, off)
        off += STRING_ENTRY.size
        if length > n - off:
            raise WireError(f"string {sid} of {length} bytes runs past the payload")
        out[sid] = bytes(payload[off:off + length]).decode("utf-8", "replace")
        off += length
    return out


def encode_strings(strings):
    """{id: text} -> STRINGS payload (used by the test client speaking the wire format)."""
    parts = []
    for sid, text in strings.items():
        raw = text.encode()
        parts.append(STRING_ENTRY.pack(sid, len(raw)) + raw)
    return b"".join(parts)


def encode_message(mtype, payload):
    return MSG_HEADER.pack(mtype, len(payload)) + payload
