"""Counters sampled from user space while recording: /proc per process, NVML per GPU.

Samples go into the raw log as META blocks of type "kctx_samples" (a few
hundred bytes each, a few per second), stamped with the trace clock:

    {"type": "kctx_samples", "ts": BOOTTIME ns,
     "proc": [[pid, rss_bytes, cpu_ns, minflt, majflt], ...],
     "gpu": [[index, util_pct, mem_used_bytes, sm_clock_mhz, power_mw, pcie_tx_Bps, pcie_rx_Bps], ...],
     "gpu_proc": [[index, pid, used_bytes], ...]}

Fields a GPU does not support are null.  The converter turns cumulative
values (cpu_ns, faults) into rates.
"""
from __future__ import annotations

import os
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
PCIE_EVERY_S = 1.0  # nvmlDeviceGetPcieThroughput blocks ~20 ms per call: sample it less often


def proc_sample(pid: int) -> list | None:
    """[pid, rss_bytes, cpu_ns, minflt, majflt] from /proc/PID/stat (one read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return _parse_stat(pid, raw)


class ProcSampler:
    """proc_sample for a set of processes that changes slowly: each
    /proc/PID/stat stays open and is read again with one pread (a third of
    the cost of open + read + close)."""

    def __init__(self):
        self._fds: dict[int, int] = {}

    def _read(self, pid: int) -> bytes | None:
        fd = self._fds.get(pid)
        if fd is not None:
            try:
                return os.pread(fd, 4096, 0)
            except OSError:  # that process is gone (ESRCH even if its pid was reused): try anew
                os.close(self._fds.pop(pid))
        try:
            fd = self._fds[pid] = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(fd, 4096, 0)
        except OSError:
            fd = self._fds.pop(pid, None)
            if fd is not None:
                os.close(fd)
            return None

    def sample(self, pids) -> list[list]:
        """proc_sample of each pid that can be read, in pid order."""
        for pid in [p for p in self._fds if p not in pids]:
            os.close(self._fds.pop(pid))
        out = []
        for pid in sorted(pids):
            raw = self._read(pid)
            s = _parse_stat(pid, raw) if raw else None
            if s:
                out.append(s)
        return out

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _parse_stat(pid: int, raw: bytes) -> list | None:
    # comm may hold spaces and parentheses: the fields start after the last ')'.
    fields = raw[raw.rfind(b")") + 2:].split()
    if not fields or fields[0] in (b"Z", b"X"):  # exited: its counters read 0, not its last values
        return None
    try:
        minflt, majflt = int(fields[7]), int(fields[9])
        cpu_ns = (int(fields[11]) + int(fields[12])) * 1_000_000_000 // CLK_TCK
        rss = int(fields[21]) * PAGE
    except (IndexError, ValueError):
        return None
    return [pid, rss, cpu_ns, minflt, majflt]


class Nvml:
    """NVML through nvidia-ml-py (module pynvml), if both it and the driver are there."""

    def __init__(self):
        self.nv = None
        self.handles: list = []
        self.unsupported: set[tuple[int, str]] = set()
        self.reason = ""
        self._pcie_at = 0.0
        self._pcie: dict[int, tuple] = {}
        try:
            import pynvml as nv
        except ImportError:
            self.reason = "nvidia-ml-py is not installed"
            return
        try:
            nv.nvmlInit()
            self.handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.reason = str(e) or type(e).__name__
            return
        if not self.handles:
            self.reason = "NVML found no GPU"
            nv.nvmlShutdown()
            return
        self.nv = nv

    @property
    def available(self) -> bool:
        return self.nv is not None

    def _get(self, i: int, what: str, fn, *args):
        if (i, what) in self.unsupported:
            return None
        try:
            return fn(self.handles[i], *args)
        except self.nv.NVMLError as e:
            if isinstance(e, self.nv.NVMLError_NotSupported):
                self.unsupported.add((i, what))
            return None

    def sample(self, pids: set[int]) -> tuple[list, list]:
        nv, now = self.nv, time.monotonic()
        if now - self._pcie_at >= PCIE_EVERY_S:
            self._pcie_at = now
            for i in range(len(self.handles)):
                tx = self._get(i, "pcie", nv.nvmlDeviceGetPcieThroughput, nv.NVML_PCIE_UTIL_TX_BYTES)
                rx = self._get(i, "pcie", nv.nvmlDeviceGetPcieThroughput, nv.NVML_PCIE_UTIL_RX_BYTES)
                self._pcie[i] = (tx * 1024 if tx is not None else None, rx * 1024 if rx is not None else None)
        gpus, procs = [], []
        for i in range(len(self.handles)):
            util = self._get(i, "util", nv.nvmlDeviceGetUtilizationRates)
            mem = self._get(i, "mem", nv.nvmlDeviceGetMemoryInfo)
            sm = self._get(i, "sm", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM)
            power = self._get(i, "power", nv.nvmlDeviceGetPowerUsage)
            tx, rx = self._pcie.get(i, (None, None))
            gpus.append([i, util.gpu if util is not None else None, mem.used if mem is not None else None,
                         sm, power, tx, rx])
            for p in self._get(i, "procs", nv.nvmlDeviceGetComputeRunningProcesses) or ():
                if p.pid in pids and p.usedGpuMemory is not None:
                    procs.append([i, p.pid, int(p.usedGpuMemory)])
        return gpus, procs

    def close(self) -> None:
        if self.nv is not None:
            try:
                self.nv.nvmlShutdown()
            except Exception:
                pass
            self.nv = None
