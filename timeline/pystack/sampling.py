"""CPU sampling: a perf_event timer on every CPU runs tl_py_sample.

One software cpu-clock event per online CPU, system-wide (pid -1), firing
`hz` times a second of that CPU's time; the BPF program keeps only samples
of recorded Python threads.  Per-CPU events need no bookkeeping as threads
come and go (per-thread events would, for every thread of every process),
and a CPU's timer costs an interrupt per period whatever runs there.
Closing the descriptors stops everything.
"""
from __future__ import annotations

import ctypes
import errno
import os
import struct

from .. import safe_input
from ..cuda import attach as cuda_attach

SYS_PERF_EVENT_OPEN = 298  # x86-64
PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK = 1, 0
PERF_ATTR_SIZE = 112       # PERF_ATTR_SIZE_VER5
ATTR_DISABLED, ATTR_FREQ = 1 << 0, 1 << 10
PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_EVENT_IOC_ENABLE = 0x2400
PERF_EVENT_IOC_SET_BPF = 0x40042408  # _IOW('$', 8, __u32)
PROGRAM = "tl_py_sample"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def online_cpus() -> list[int]:
    try:  # a kernel file, nobody else's name: read as we are
        text = safe_input.read_file("/sys/devices/system/cpu/online", None, limit=4096, whole=False).decode().strip()
    except (OSError, UnicodeDecodeError):
        return list(range(os.cpu_count() or 1))
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus += range(int(lo), int(hi or lo) + 1)
    return cpus


def _open(cpu: int, hz: int) -> int:
    attr = ctypes.create_string_buffer(PERF_ATTR_SIZE)
    # type, size, config, sample_freq, sample_type, read_format, flag bits
    struct.pack_into("<IIQQQQQ", attr, 0, PERF_TYPE_SOFTWARE, PERF_ATTR_SIZE, PERF_COUNT_SW_CPU_CLOCK, hz, 0, 0,
                     ATTR_DISABLED | ATTR_FREQ)
    fd = _libc.syscall(SYS_PERF_EVENT_OPEN, attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return int(fd)


class Sampler:
    """The per-CPU timers; start() attaches the program, close() ends them."""

    def __init__(self, obj, hz: int):
        self.obj, self.hz, self.fds = obj, hz, []

    def start(self) -> str | None:
        """None, or why sampling is off (one line)."""
        prog = cuda_attach._bind().bpf_program__fd(self.obj.program(PROGRAM))
        for cpu in online_cpus():
            try:
                fd = _open(cpu, self.hz)
            except OSError as e:
                if e.errno == errno.ENODEV:  # a CPU gone offline meanwhile
                    continue
                self.close()
                return f"perf_event_open: {e.strerror}"
            self.fds.append(fd)
            if (_libc.ioctl(fd, PERF_EVENT_IOC_SET_BPF, prog) < 0
                    or _libc.ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) < 0):
                err = ctypes.get_errno()
                self.close()
                return f"attaching the sampler: {os.strerror(err)}"
        return None if self.fds else "no online CPU"

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []
