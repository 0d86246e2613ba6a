"""Attaching tl_py_call to the CUDA functions whose stacks we take.

With the cuda family loaded, no uprobe of ours: its entry programs tail-call
tl_py_hook through their program array (CALL_HOOKS, by probe id), one
consumer of each breakpoint instead of two.  Without it, one uprobe_multi
link per library (the cuda family's helper, timeline/cuda/attach.py,
explains why: detaching many single uprobes takes seconds), or one uprobe
per function on kernels before 6.6.
"""
from __future__ import annotations

import ctypes
import os
import struct

from .. import libbpf
from ..cuda import attach as cuda_attach

PROGRAM = "tl_py_call"
HOOK = "tl_py_hook"
CALL_HOOKS = "tl_call_hooks"  # the cuda family's program array, by probe id
CODE_FREE = "tl_py_code_free"


def prepare(obj: libbpf.BPFObject) -> None:
    """Before load: uprobe_multi programs when the kernel has them."""
    obj.uprobe_multi = cuda_attach.multi_supported()
    if obj.uprobe_multi:
        for name in (PROGRAM, HOOK, CODE_FREE):
            cuda_attach._bind().bpf_program__set_expected_attach_type(obj.program(name),
                                                                      cuda_attach.BPF_TRACE_UPROBE_MULTI)


def program_fd(obj: libbpf.BPFObject, name: str) -> int:
    """A loaded program's fd (for a program array)."""
    return cuda_attach._bind().bpf_program__fd(obj.program(name))


def code_free(obj: libbpf.BPFObject, path: str, offset: int, pid: int) -> libbpf.Link:
    """tl_py_code_free on code_dealloc of `path`, for process `pid` only: the
    function runs in every process of that interpreter file, on the machine
    (other users' Pythons, tests), and a breakpoint there costs each of them
    a trap per code object freed; with the pid filter the kernel inserts it
    in this process alone.  Raises BPFError."""
    if not getattr(obj, "uprobe_multi", False):
        return obj.attach_uprobe(CODE_FREE, path, offset=offset, pid=pid)
    offs = (ctypes.c_uint64 * 1)(offset)
    cpath = ctypes.create_string_buffer(os.fsencode(path))
    attr = ctypes.create_string_buffer(128)  # union bpf_attr, link_create.uprobe_multi, with its pid
    struct.pack_into("<IIIIQQQQIII", attr, 0, cuda_attach._bind().bpf_program__fd(obj.program(CODE_FREE)), 0,
                     cuda_attach.BPF_TRACE_UPROBE_MULTI, 0, ctypes.addressof(cpath), ctypes.addressof(offs), 0, 0,
                     1, 0, pid)
    fd = cuda_attach._libc.syscall(cuda_attach.SYS_BPF, cuda_attach.BPF_LINK_CREATE, attr, ctypes.sizeof(attr))
    if fd < 0:
        raise libbpf.BPFError(f"uprobe_multi link {CODE_FREE} on {path} for pid {pid}: "
                              f"{os.strerror(ctypes.get_errno())}")
    link = cuda_attach.FdLink(int(fd), f"{CODE_FREE}@{path} pid {pid}")
    obj.links.append(link)
    return link


def attach(obj: libbpf.BPFObject, path: str, probes: list[tuple[int, int]]) -> list[str]:
    """Attach (file offset, cookie) probes to `path`; return errors."""
    if not probes:
        return []
    if getattr(obj, "uprobe_multi", False):
        try:
            cuda_attach._multi_link(obj, PROGRAM, path, [o for o, _ in probes], [c for _, c in probes], False)
        except libbpf.BPFError as e:
            return [str(e)]
        return []
    errors = []
    for off, ck in probes:
        try:
            obj.attach_uprobe(PROGRAM, path, offset=off, cookie=ck)
        except libbpf.BPFError as e:
            errors.append(f"{hex(off)}: {str(e).splitlines()[0]}")
    return errors
