"""RingReader on a ring laid out like the kernel's, in a memfd (no BPF needed).

Layout (kernel/bpf/ringbuf.c): consumer page, producer page, then the data
area mapped twice in a row; the fake producer writes every record into both
copies, which is what the kernel's double mapping shows user space.
"""
import mmap
import os
import struct

import numpy as np

from timeline import events, sched_records
from timeline.ring_reader import RingReader

PAGE = mmap.PAGESIZE
SIZE = 4 * PAGE
STRIDE = events.ring_stride(sched_records.SCHED_EVENT)


class FakeRing:
    def __init__(self):
        self.fd = os.memfd_create("fake-ring")
        os.ftruncate(self.fd, 2 * PAGE + 2 * SIZE)
        self.mem = mmap.mmap(self.fd, 2 * PAGE + 2 * SIZE)
        self.prod = 0

    def set_pos(self, pos: int) -> None:
        struct.pack_into("<Q", self.mem, 0, pos)
        struct.pack_into("<Q", self.mem, PAGE, pos)
        self.prod = pos

    def consumer(self) -> int:
        return struct.unpack_from("<Q", self.mem, 0)[0]

    def put(self, kind: int, tid: int, busy: bool = False) -> int:
        """Commit one sched record (or leave it BUSY); returns its position."""
        rec = np.zeros(1, sched_records.SCHED_EVENT)
        rec["kind"], rec["tid"] = kind, tid
        hdr = sched_records.SCHED_EVENT.itemsize | (events.RINGBUF_BUSY_BIT if busy else 0)
        blob = struct.pack("<II", hdr, 0) + rec.tobytes()
        self._write(self.prod, blob)
        pos, self.prod = self.prod, self.prod + STRIDE
        struct.pack_into("<Q", self.mem, PAGE, self.prod)
        return pos

    def _write(self, pos: int, blob: bytes) -> None:
        for i, b in enumerate(blob):  # byte by byte: a record may run past the end of the area
            off = (pos + i) % SIZE
            self.mem[2 * PAGE + off] = self.mem[2 * PAGE + SIZE + off] = b

    def commit(self, pos: int) -> None:
        self._write(pos, struct.pack("<I", sched_records.SCHED_EVENT.itemsize))

    def close(self) -> None:
        self.mem.close()
        os.close(self.fd)


def tids(data: bytes) -> list[int]:
    return events.decode_ring_bytes(data, sched_records.SCHED_EVENT)["tid"].tolist()


def test_drain_stops_at_a_busy_record_and_counts_kinds():
    ring = FakeRing()
    reader = RingReader(ring.fd, SIZE, sched_records.SCHED_EVENT)
    try:
        assert reader.drain() == b""
        ring.put(sched_records.SCHED_SWITCH, 1)
        ring.put(sched_records.SCHED_SWITCH, 2)
        busy = ring.put(sched_records.SCHED_WAKING, 3, busy=True)
        ring.put(sched_records.SCHED_SWITCH, 4)
        ring.put(sched_records.SCHED_WAKING, 5)
        assert tids(reader.drain()) == [1, 2]
        assert ring.consumer() == 2 * STRIDE
        assert reader.drain() == b""  # the first pending record is still being written
        ring.commit(busy)
        assert tids(reader.drain()) == [3, 4, 5]
        assert ring.consumer() == ring.prod and reader.records == 5 and reader.bytes == 5 * STRIDE
        assert {int(k): int(reader.kinds[k]) for k in np.flatnonzero(reader.kinds)} == \
            {sched_records.SCHED_SWITCH: 3, sched_records.SCHED_WAKING: 2}
    finally:
        reader.close()
        ring.close()


def test_span_across_the_end_of_the_ring_comes_out_in_order():
    ring = FakeRing()
    n_fit = SIZE // STRIDE
    ring.set_pos((n_fit - 2) * STRIDE + 3 * SIZE)  # positions only grow: a ring that wrapped three times
    reader = RingReader(ring.fd, SIZE, sched_records.SCHED_EVENT)
    try:
        for tid in range(10, 16):
            ring.put(sched_records.SCHED_SWITCH, tid)
        assert tids(reader.drain(max_bytes=4 * STRIDE + 5)) == [10, 11, 12, 13]  # whole records only
        assert tids(reader.drain()) == [14, 15]
        assert reader.kinds[sched_records.SCHED_SWITCH] == 6
    finally:
        reader.close()
        ring.close()
