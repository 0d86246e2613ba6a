"""Reading another process's memory: process_vm_readv, bounded.

Every read names its size; nothing here follows a pointer by itself.  A
process that exited, an unmapped address or a partial read is None, never
an exception, so a target exiting mid-read costs one unresolved frame.
"""
from __future__ import annotations

import ctypes
import errno
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_libc.process_vm_readv.restype = ctypes.c_ssize_t
_libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p,
                                   ctypes.c_ulong, ctypes.c_ulong]

MAX_READ = 1 << 20  # the most one read may ask for
BATCH_IOVECS = 1024  # UIO_MAXIOV: iovecs one process_vm_readv may take
BATCH_BYTES = 4 << 20  # the most one batched read may ask for


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class ProcessMemory:
    """Reads of one process's memory (by pid; a reused pid reads another process:
    callers drop a ProcessMemory when its process exits)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.reads = 0

    def read(self, addr: int, size: int) -> bytes | None:
        return self.read_many([(addr, size)])[0]

    def read_many(self, spans: list[tuple[int, int] | None]) -> list[bytes | None]:
        """Each (address, size) span's bytes, in as few process_vm_readv calls as
        the kernel's iovec limit allows (a new code object costs ~10 reads: one
        syscall each made naming a torch job's stacks most of the recorder's
        time).  The kernel stops a batch at the first span it cannot read, whole
        spans only: that span is None, the batch goes on after it."""
        out: list[bytes | None] = [None] * len(spans)
        todo = [i for i, s in enumerate(spans)
                if s is not None and 0 < s[1] <= MAX_READ and s[0] > 0 and s[0] + s[1] <= 1 << 64]
        pos = 0
        while pos < len(todo):
            batch, total = [], 0
            for i in todo[pos:pos + BATCH_IOVECS]:
                if batch and total + spans[i][1] > BATCH_BYTES:
                    break
                batch.append(i)
                total += spans[i][1]
            buf = ctypes.create_string_buffer(total)
            local = _Iovec(ctypes.cast(buf, ctypes.c_void_p), total)
            remote = (_Iovec * len(batch))(*(_Iovec(*spans[i]) for i in batch))
            self.reads += 1
            got = _libc.process_vm_readv(self.pid, ctypes.byref(local), 1, remote, len(batch), 0)
            if got < 0 and ctypes.get_errno() in (errno.ESRCH, errno.EPERM):
                break  # the process is gone (or no longer ours): nothing more to read
            raw, off, done = buf.raw, 0, 0
            for i in batch:
                size = spans[i][1]
                if off + size > got:
                    break
                out[i] = raw[off:off + size]
                off += size
                done += 1
            pos += done if done == len(batch) else done + 1  # the span the kernel stopped at: unreadable
        return out

    def u64(self, addr: int) -> int | None:
        raw = self.read(addr, 8)
        return None if raw is None else struct.unpack("<Q", raw)[0]
