"""Whether this process may load eBPF programs: its effective capabilities."""
from __future__ import annotations

CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39


def effective_caps() -> int:
    """CapEff of this process, a bit per capability."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def can_load_bpf(caps: int | None = None) -> bool:
    """CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON (Linux >= 5.8)."""
    caps = effective_caps() if caps is None else caps
    return bool(caps >> CAP_SYS_ADMIN & 1 or (caps >> CAP_BPF & 1 and caps >> CAP_PERFMON & 1))
