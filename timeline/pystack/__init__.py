"""Python call stacks on the timeline (the `pystack` event family).

    layouts.py     CPython's structs per minor version (3.10-3.13), _Py_DebugOffsets
    interpreter.py finding a process's interpreter: maps, ELF symbols, version
    memory.py      process_vm_readv, bounded
    symbolize.py   code objects -> function, file, line (line tables of 3.10 and 3.11+)
    walk.py        the BPF walk in Python, for tests
    probes.py      which CUDA calls get a stack
    attach.py      the uprobe on those calls
    plugin.py      recorder plugin: per-process layouts, symbolizing new stacks
    converter.py   stacks on CUDA call slices, wait slices, stack samples

The BPF side is pystack.bpf.c here, its records records.h (mirrored by
records.py); docs/python-stacks.md explains the design.
"""

import os


def kernel_supported(release: str | None = None) -> bool:
    """pystack.bpf.c needs tp_btf, task storage and uprobe attach cookies and bpf_loop (Linux 5.17: bpf_loop)."""
    try:
        major, minor = (int(x) for x in (release or os.uname().release).split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 17)
