"""Attaching tl_py_call to the CUDA functions whose stacks we take.

One uprobe_multi link per library (the cuda family's helper, timeline/cuda/
attach.py, explains why: detaching many single uprobes takes seconds), or
one uprobe per function on kernels before 6.6.  The program shares the
functions' breakpoints with the cuda family's own probes: a second consumer
of a uprobe costs its program's run, not another trap.
"""
from __future__ import annotations

from .. import libbpf
from ..cuda import attach as cuda_attach

PROGRAM = "tl_py_call"


def prepare(obj: libbpf.BPFObject) -> None:
    """Before load: an uprobe_multi program when the kernel has them."""
    obj.uprobe_multi = cuda_attach.multi_supported()
    if obj.uprobe_multi:
        cuda_attach._bind().bpf_program__set_expected_attach_type(obj.program(PROGRAM),
                                                                  cuda_attach.BPF_TRACE_UPROBE_MULTI)


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
