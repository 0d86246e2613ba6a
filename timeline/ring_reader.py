"""Drain a BPF ring buffer by reading its mmap directly, in bulk.

libbpf's ring_buffer__consume calls back once per record; at millions of
events per second a Python callback per record costs more than the probes.
Every timeline ring carries records of one fixed size, so we can instead find
the committed span [consumer, producer) with two loads, check the BUSY bits of
its record headers with numpy, copy the span out as one bytes object and
advance the consumer position: one copy per drain, no per-record Python.
The recorder drains every ring several times a second while training runs
on the same CPUs, so a drain is kept to a handful of numpy calls (strided
views, no temporary copies), and counting records per kind is one of them.

Kernel ring buffer layout (see kernel/bpf/ringbuf.c): page 0 holds
consumer_pos (writable by user space); page 1 holds producer_pos; the data
area of `size` bytes follows and is mapped twice in a row, so a span that
wraps is still contiguous in our mapping.  Each record starts with an 8-byte
header whose u32 length carries BUSY (bit 31, still being written) and
DISCARD (bit 30) flags; records are padded to 8 bytes.
"""
from __future__ import annotations

import mmap
import struct

import numpy as np

from .events import RINGBUF_BUSY_BIT, RINGBUF_HDR, ring_stride

_U64 = struct.Struct("<Q")


class RingReader:
    def __init__(self, map_fd: int, size: int, record_dtype: np.dtype):
        page = mmap.PAGESIZE
        if size & (size - 1) or size % page:
            raise ValueError("ring size must be a power of two multiple of the page size")
        self.size = size
        self.mask = size - 1
        self.stride = ring_stride(record_dtype)
        self._cons = mmap.mmap(map_fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self._prod = mmap.mmap(map_fd, page + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
        self._data = np.frombuffer(self._prod, dtype=np.uint8, offset=page)
        self._lens = np.frombuffer(self._prod, dtype="<u4", offset=page)  # record header words
        self._page = page
        kind = (record_dtype.fields or {}).get("kind")
        self._kind_off = RINGBUF_HDR + kind[1] if kind else None
        self.records = 0
        self.bytes = 0
        self.kinds = np.zeros(256, np.int64)  # records drained, by their `kind` byte

    def pending_bytes(self) -> int:
        return _U64.unpack_from(self._prod, 0)[0] - _U64.unpack_from(self._cons, 0)[0]

    def drain(self, max_bytes: int | None = None) -> bytes:
        """Copy out every committed record; return them (headers included)."""
        cons = _U64.unpack_from(self._cons, 0)[0]
        prod = _U64.unpack_from(self._prod, 0)[0]  # x86 TSO: loads are acquire
        avail = prod - cons
        if max_bytes is not None:
            avail = min(avail, max_bytes - max_bytes % self.stride)
        n = avail // self.stride
        if n == 0:
            return b""
        start = cons & self.mask
        end = start + n * self.stride
        lens = self._lens[start >> 2 : end >> 2 : self.stride >> 2]  # strides are multiples of 8
        if lens.max() >= RINGBUF_BUSY_BIT:
            n = int(np.argmax(lens >= RINGBUF_BUSY_BIT))  # stop at the first record still being written
            if n == 0:
                return b""
            end = start + n * self.stride
        out = self._data[start:end].tobytes()
        if self._kind_off is not None:
            self.kinds += np.bincount(self._data[start + self._kind_off : end : self.stride], minlength=256)
        # Release the space only after the copy is done.
        _U64.pack_into(self._cons, 0, cons + n * self.stride)
        self.records += n
        self.bytes += len(out)
        return out

    def close(self) -> None:
        self._data = self._lens = None
        for m in (self._prod, self._cons):
            try:
                m.close()
            except BufferError:
                pass  # a numpy view still exists somewhere; the GC closes it
