"""counters family: /proc and NVML samplers, their conversion, the no-NVML path.

No GPU on the machines these tests run on: NVML presence is covered by a fake
pynvml module (the sampling code) and a synthetic raw log (the conversion);
the real-NVML path is unvalidated until a GPU machine runs it.
"""
import sys
import types

import pytest

from timeline.converters import convert
from timeline.kctx import samplers
from timeline.trace_processor import open_trace
from rawlog_factory import BOOT0, LogBuilder, end_block

MB = 1 << 20


def test_proc_sample_of_self():
    import os
    pid, rss, cpu_ns, minflt, majflt = samplers.proc_sample(os.getpid())
    assert pid == os.getpid() and rss > 10 * MB and cpu_ns > 0 and minflt > 0 and majflt >= 0
    assert samplers.proc_sample(2 ** 22 + 5) is None  # no such process


def test_proc_sampler_keeps_files_open_and_follows_the_set():
    import os
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    ps = samplers.ProcSampler()
    try:
        first = ps.sample({os.getpid(), child.pid, 2 ** 22 + 5})
        assert [s[0] for s in first] == sorted([os.getpid(), child.pid])
        x = bytearray(64 * MB)  # the same open file shows new values
        x[::4096] = b"x" * len(x[::4096])
        (again,) = ps.sample({os.getpid()})
        assert again[1] >= first[[s[0] for s in first].index(os.getpid())][1] + 60 * MB
        assert again[3] > first[[s[0] for s in first].index(os.getpid())][3]  # minor faults
        child.stdin.close()
        child.wait()
        assert [s[0] for s in ps.sample({os.getpid(), child.pid})] == [os.getpid()]  # gone: left out
        assert sorted(ps._fds) == [os.getpid()]  # and its file closed
    finally:
        ps.close()
        if child.poll() is None:
            child.kill()


def _fake_pynvml():
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    nv.NVMLError, nv.NVMLError_NotSupported = NVMLError, NVMLError_NotSupported
    nv.NVML_CLOCK_SM, nv.NVML_PCIE_UTIL_TX_BYTES, nv.NVML_PCIE_UTIL_RX_BYTES = 1, 0, 1
    nv.nvmlInit = nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=40 + h, memory=5)
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=(h + 1) * 1000 * MB, total=80000 * MB)
    nv.nvmlDeviceGetClockInfo = lambda h, c: 1410
    nv.nvmlDeviceGetPcieThroughput = lambda h, c: 100 if c == 0 else 200

    def power(h):
        if h == 1:
            raise NVMLError_NotSupported()
        return 250_000
    nv.nvmlDeviceGetPowerUsage = power
    nv.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=4242, usedGpuMemory=512 * MB),
                                                         types.SimpleNamespace(pid=1, usedGpuMemory=MB)]
    return nv


def test_nvml_sampling_with_a_fake_library(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    nv = samplers.Nvml()
    assert nv.available and len(nv.handles) == 2
    gpus, procs = nv.sample({4242})
    assert gpus[0] == [0, 40, 1000 * MB, 1410, 250_000, 100 * 1024, 200 * 1024]
    assert gpus[1][4] is None and (1, "power") in nv.unsupported  # not asked again
    assert procs == [[0, 4242, 512 * MB], [1, 4242, 512 * MB]]  # only tracked pids
    nv.close()


def test_nvml_absent(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    nv = samplers.Nvml()
    assert not nv.available and "not installed" in nv.reason


def test_counter_tracks_from_samples(tmp_path):
    b = LogBuilder()
    b.procs(BOOT0, [{"pid": 4242, "ppid": 1, "comm": "python3", "cmdline": ["python3", "train.py"],
                     "threads": [{"tid": 4242, "comm": "python3"}]}])
    for i in range(3):
        ts = BOOT0 + (i + 1) * 200_000_000
        b.blocks.append(("meta", {
            "type": "kctx_samples", "ts": ts,
            "proc": [[4242, (100 + i) * MB, i * 100_000_000, 1000 * i, 10 * i]],  # 0.1 s CPU per 0.2 s
            "gpu": [[0, 50, 2000 * MB, 1410, 300_000, 1000, 2000], [1, 7, None, None, None, None, None]],
            "gpu_proc": [[0, 4242, 256 * MB], [1, 4242, 256 * MB]]}))
    raw = b.write(tmp_path / "s.tlraw", end_block(stop_ts=BOOT0 + 10**9))
    out = str(tmp_path / "s.pftrace")
    convert(raw, out)
    tp = open_trace(out)
    try:
        gpu = dict(tp.query("""select t.name, max(c.value) from counter c join counter_track t on c.track_id = t.id
                               where t.name like 'gpu%' group by 1""").rows)
        assert gpu == {"gpu0.utilization_pct": 50, "gpu0.memory_used_bytes": 2000 * MB, "gpu0.sm_clock_mhz": 1410,
                       "gpu0.power_w": 300, "gpu0.pcie_tx_bytes_per_s": 1000, "gpu0.pcie_rx_bytes_per_s": 2000,
                       "gpu1.utilization_pct": 7, "gpu.memory_used_bytes": 512 * MB}
        proc = dict(tp.query("""select t.name, max(c.value) from counter c join process_counter_track t
                                on c.track_id = t.id join process p using (upid) where p.pid = 4242
                                group by 1""").rows)
        assert proc["rss_bytes"] == 102 * MB and proc["gpu.memory_used_bytes"] == 512 * MB
        assert proc["cpu_pct"] == pytest.approx(50)
        assert proc["minor_faults_per_s"] == pytest.approx(5000) and proc["major_faults_per_s"] == pytest.approx(50)
    finally:
        tp.close()
