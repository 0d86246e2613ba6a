"""Reading another process's memory: process_vm_readv, bounded.

Every read names its size; nothing here follows a pointer by itself.  A
process that exited, an unmapped address or a partial read is None, never
an exception, so a target exiting mid-read costs one unresolved frame.
"""
from __future__ import annotations

import ctypes
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_libc.process_vm_readv.restype = ctypes.c_ssize_t
_libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p,
                                   ctypes.c_ulong, ctypes.c_ulong]

MAX_READ = 1 << 20  # the most one read may ask for


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class ProcessMemory:
    """Reads of one process's memory (by pid; a reused pid reads another process:
    callers drop a ProcessMemory when its process exits)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.reads = 0

    def read(self, addr: int, size: int) -> bytes | None:
        if not 0 < size <= MAX_READ or addr <= 0 or addr + size > 1 << 64:
            return None
        buf = ctypes.create_string_buffer(size)
        local = _Iovec(ctypes.cast(buf, ctypes.c_void_p), size)
        remote = _Iovec(addr, size)
        self.reads += 1
        n = _libc.process_vm_readv(self.pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if n != size:
            return None
        return buf.raw

    def u64(self, addr: int) -> int | None:
        raw = self.read(addr, 8)
        return None if raw is None else struct.unpack("<Q", raw)[0]
