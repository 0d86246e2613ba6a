"""Drain a BPF ring buffer by reading its mmap directly, in bulk.

libbpf's ring_buffer__consume calls back once per record; at millions of
events per second a Python callback per record costs more than the probes.
Every timeline ring carries records of one fixed size, so we can instead find
the committed span [consumer, producer) with two loads, check the BUSY bits of
its record headers, copy the span out as one bytes object and advance the
consumer position: one copy per drain, no per-record Python.

The recorder drains every ring several times a second while training runs on
the same CPUs, and each drain starts cold (caches and branch predictors full
of the workload's state), where every interpreter step and numpy call costs
tens of microseconds.  So a drain is a few built-in operations: extended
slices of the mmap give the headers' top bytes (BUSY is bit 31 of the
little-endian length word: a top byte >= 0x80, found by one bytes.isascii())
and each record's `kind` byte (counted in bulk once enough have gathered).

Kernel ring buffer layout (see kernel/bpf/ringbuf.c): page 0 holds
consumer_pos (writable by user space); page 1 holds producer_pos; the data
area of `size` bytes follows and is mapped twice in a row, so a span that
wraps is still contiguous in our mapping.  Each record starts with an 8-byte
header whose u32 length carries BUSY (bit 31, still being written) and
DISCARD (bit 30) flags; records are padded to 8 bytes.

Both positions are read and written as single aligned 8-byte accesses (numpy
views): the kernel reads consumer_pos without a lock on every reserve, and
struct.pack_into would zero the 8 bytes and then write them one at a time, so
a reserve landing in between saw the ring as full and lost its record.
"""
from __future__ import annotations

import mmap

import numpy as np

from .events import RINGBUF_HDR, ring_stride

_BUSY_BYTE = 3  # offset of the header byte holding BUSY (bit 31 of the u32 length, little-endian)
_KIND_FOLD = 1 << 20  # kind bytes gathered before they are counted


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
        self._cons_pos = np.frombuffer(self._cons, dtype=np.uint64, count=1)
        self._prod_pos = np.frombuffer(self._prod, dtype=np.uint64, count=1)
        self._page = page
        kind = (record_dtype.fields or {}).get("kind")
        self._kind_off = RINGBUF_HDR + kind[1] if kind else None
        self.records = 0
        self.bytes = 0
        self._kinds = np.zeros(256, np.int64)
        self._kind_bytes: list[bytes] = []
        self._kind_pending = 0

    def pending_bytes(self) -> int:
        return int(self._prod_pos[0]) - int(self._cons_pos[0])

    def drain(self, max_bytes: int | None = None) -> bytes:
        """Copy out every committed record; return them (headers included)."""
        cons = int(self._cons_pos[0])
        prod = int(self._prod_pos[0])  # x86 TSO: loads are acquire
        avail = prod - cons
        if max_bytes is not None:
            avail = min(avail, max_bytes - max_bytes % self.stride)
        n = avail // self.stride
        if n == 0:
            return b""
        mm, stride = self._prod, self.stride
        start = self._page + (cons & self.mask)
        end = start + n * stride
        top = mm[start + _BUSY_BYTE : end : stride]
        if not top.isascii():  # stop at the first record still being written
            n = next(i for i, b in enumerate(top) if b & 0x80)
            if n == 0:
                return b""
            end = start + n * stride
        out = mm[start:end]
        if self._kind_off is not None:
            self._kind_bytes.append(mm[start + self._kind_off : end : stride])
            self._kind_pending += n
            if self._kind_pending >= _KIND_FOLD:
                self._fold_kinds()
        self._release(cons + n * stride)  # only after the copy is done
        self.records += n
        self.bytes += len(out)
        return out

    def _release(self, pos: int) -> None:
        """Hand [.., pos) back to the kernel, after the copy is done (x86 TSO keeps the order)."""
        self._cons_pos[0] = pos  # one 8-byte store, never a torn or zeroed value

    def _fold_kinds(self) -> None:
        if self._kind_bytes:
            self._kinds += np.bincount(np.frombuffer(b"".join(self._kind_bytes), np.uint8), minlength=256)
            self._kind_bytes.clear()
            self._kind_pending = 0

    @property
    def kinds(self) -> np.ndarray:
        """Records drained so far, by their `kind` byte (256 counts)."""
        self._fold_kinds()
        return self._kinds

    def close(self) -> None:
        self._fold_kinds()
        self._cons_pos = self._prod_pos = None  # numpy views pin the mmaps
        for m in (self._prod, self._cons):
            try:
                m.close()
            except BufferError:
                pass  # a numpy view still exists somewhere; the GC closes it
