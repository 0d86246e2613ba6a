"""The Emscripten runtime imports of trace_processor.wasm, in Python.

The module imports ~40 functions that Emscripten's JS runtime provides
(clocks, stdio, a virtual file system). trace_processor only needs clocks,
stderr and heap growth in RPC mode; everything else is a stub that fails like
a missing file system would: trace data only ever arrives over the RPC.
"""

from __future__ import annotations

import calendar
import struct
import sys
import time
from typing import Callable

import wasmtime

# WASI / musl errno values as the Emscripten runtime returns them.
_EBADF, _ENOENT, _ENOSYS, _ENOTTY, _ESPIPE = 8, 44, 52, 59, 70


class WasmAbort(Exception):
    """Raised from host functions when the wasm code aborts/exits."""


def host_imports(tp) -> dict[str, Callable]:
    """Import name -> implementation, for the WasmTraceProcessor `tp` (a
    weakref.proxy: host functions stay registered until the store dies and
    must not keep the engine alive).  They use its memory (tp._mem,
    tp._store, tp._u, tp._psize, tp._heap_max) and its stderr log."""
    def rd(ptr: int, n: int) -> bytes:
        ptr = tp._u(ptr)
        return bytes(tp._mem.read(tp._store, ptr, ptr + n))

    def wr(ptr: int, data: bytes) -> None:
        tp._mem.write(tp._store, data, tp._u(ptr))

    def cstr(ptr: int, limit: int = 4096) -> str:
        raw = rd(ptr, limit) if ptr else b""
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    def ptr_fmt() -> str:
        return "Q" if tp._psize == 8 else "I"

    def write_out(data: bytes) -> None:
        data = tp._stderr_partial + data
        *lines, tp._stderr_partial = data.split(b"\n")
        for ln in lines:
            s = ln.decode("utf-8", "replace")
            tp.stderr.append(s)
            if tp._echo_stderr:
                print(f"[trace_processor.wasm] {s}", file=sys.stderr)

    def fd_write(fd, iov, iovcnt, pnum):
        ps, fmt = tp._psize, ptr_fmt()
        total = 0
        for i in range(iovcnt):
            base, ln = struct.unpack("<" + fmt * 2, rd(iov + i * 2 * ps, 2 * ps))
            if ln:
                write_out(rd(base, ln))  # stdout and stderr are both just logs
            total += ln
        wr(pnum, struct.pack("<" + fmt, total))
        return 0

    def fd_read(fd, iov, iovcnt, pnum):
        wr(pnum, struct.pack("<" + ptr_fmt(), 0))  # EOF on everything
        return 0

    def fd_fdstat_get(fd, out):
        if fd > 2:
            return _EBADF
        wr(out, bytes([2]) + bytes(23))  # filetype = character device
        return 0

    def clock_time_get(clock_id, precision, out):
        ns = time.time_ns() if clock_id == 0 else time.monotonic_ns()
        wr(out, struct.pack("<Q", ns))
        return 0

    def environ_sizes_get(pcount, psize):
        wr(pcount, struct.pack("<" + ptr_fmt(), 0))
        wr(psize, struct.pack("<" + ptr_fmt(), 0))
        return 0

    def resize_heap(requested):
        mem, store = tp._mem, tp._store
        cur = mem.data_len(store)
        requested = tp._u(requested)
        limit = tp._heap_max()
        if requested > limit:
            return 0
        # Grow with headroom (like Emscripten) to avoid one grow per malloc.
        target = min(limit, max(requested, cur + cur // 5))
        pages = (target - cur + 65535) // 65536
        try:
            mem.grow(store, pages)
            return 1
        except wasmtime.WasmtimeError:
            try:  # headroom may not fit; retry with the bare minimum
                mem.grow(store, (requested - cur + 65535) // 65536)
                return 1
            except wasmtime.WasmtimeError:
                return 0

    def tzset(timezone, daylight, std_name, dst_name):
        wr(timezone, struct.pack("<i", 0))
        wr(daylight, struct.pack("<i", 0))
        wr(std_name, b"UTC\0")
        wr(dst_name, b"UTC\0")

    def gmtime(t, tm):
        # Always UTC: trace timestamps never depend on the host time zone.
        g = time.gmtime(t)
        wr(tm, struct.pack("<9i", g.tm_sec, g.tm_min, g.tm_hour, g.tm_mday, g.tm_mon - 1,
                           g.tm_year - 1900, (g.tm_wday + 1) % 7, g.tm_yday - 1, 0))

    def timegm(tm):
        sec, mn, hour, mday, mon, year = struct.unpack("<6i", rd(tm, 24))
        return calendar.timegm((year + 1900, mon + 1, mday, hour, mn, sec, 0, 0, 0))

    def abort(*_):
        raise WasmAbort("abort() called")

    def assert_fail(cond, filename, line, func):
        raise WasmAbort(f"assertion failed: {cstr(cond)} at {cstr(filename)}:{line} ({cstr(func)})")

    def err(ptr):
        write_out(cstr(ptr).encode() + b"\n")

    def getcwd(buf, size):
        if size < 2:
            return -68  # ERANGE
        wr(buf, b"/\0")
        return 2

    def ret(v):
        return lambda *_: v

    t_start = time.perf_counter()
    return {
        "emscripten_get_now": lambda: (time.perf_counter() - t_start) * 1e3,
        "emscripten_date_now": lambda: time.time() * 1e3,
        "clock_time_get": clock_time_get,
        "emscripten_get_heap_max": lambda: tp._heap_max_signed(),
        "emscripten_resize_heap": resize_heap,
        "fd_write": fd_write,
        "fd_read": fd_read,
        "fd_fdstat_get": fd_fdstat_get,
        "fd_close": ret(0),
        "fd_sync": ret(0),
        "fd_seek": ret(_ESPIPE),
        "environ_sizes_get": environ_sizes_get,
        "environ_get": ret(0),
        "emscripten_err": err,
        "_tzset_js": tzset,
        "_localtime_js": gmtime,
        "_gmtime_js": gmtime,
        "_timegm_js": timegm,
        "_abort_js": abort,
        "__assert_fail": assert_fail,
        # No file system: trace data only ever arrives over the RPC.
        "__syscall_openat": ret(-_ENOENT),
        "__syscall_faccessat": ret(-_ENOENT),
        "__syscall_stat64": ret(-_ENOENT),
        "__syscall_lstat64": ret(-_ENOENT),
        "__syscall_newfstatat": ret(-_ENOENT),
        "__syscall_readlinkat": ret(-_ENOENT),
        "__syscall_ioctl": ret(-_ENOTTY),
        "__syscall_getcwd": getcwd,
        "__syscall_fcntl64": ret(-_ENOSYS),
        "__syscall_fstat64": ret(-_ENOSYS),
        "__syscall_fchmod": ret(-_ENOSYS),
        "__syscall_chmod": ret(-_ENOSYS),
        "__syscall_fchown32": ret(-_ENOSYS),
        "__syscall_ftruncate64": ret(-_ENOSYS),
        "__syscall_mkdirat": ret(-_ENOSYS),
        "__syscall_rmdir": ret(-_ENOSYS),
        "__syscall_unlinkat": ret(-_ENOSYS),
        "__syscall_utimensat": ret(-_ENOSYS),
        "_mmap_js": ret(-_ENOSYS),  # only used for file-backed mmap
        "_munmap_js": ret(-_ENOSYS),
    }
