"""CUDA runtime, driver and NCCL calls on the timeline (the `cuda` event family).

    probes.py     the probed functions: argument slots, result pointers, roles
    discovery.py  finding libcudart/libcuda/libnccl copies, /proc/PID/maps, rank env
    attach.py     uprobe_multi links (one per library and program) or per-function uprobes
    plugin.py     recorder plugin: attach before launch, watch mappings while recording
    symbols.py    ELF exports and symbol lookup (numpy over .dynsym/.symtab), demangling
    decode.py     raw records -> slice args, in bulk per probe
    resolve.py    kernel function pointers -> names through mapping snapshots
    converter.py  slices, counters and graph flows through a TrackSink

The BPF side is cuda.bpf.c here, its records records.h (mirrored by
records.py); docs/cuda.md explains the design.
"""

import os


def kernel_supported(release: str | None = None) -> bool:
    """cuda.bpf.c needs attach cookies in uprobes (Linux 5.15) and task storage."""
    try:
        major, minor = (int(x) for x in (release or os.uname().release).split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 15)
