"""The stack walk of pystack.bpf.c, in Python, over process_vm_readv.

The same steps and the same layout table as the BPF walker, so a test can
check the table against a live interpreter without loading BPF (and the
BPF walker against this one).  Not used while recording.
"""
from __future__ import annotations

import struct

from . import records as R
from .interpreter import Interpreter
from .memory import ProcessMemory
from .symbolize import NOT_STARTED, CodeReader

MAX_THREADS = 256


def thread_states(mem: ProcessMemory, interp: Interpreter) -> list[int]:
    """Every PyThreadState of every interpreter, in list order."""
    lay, out = interp.layout, []
    it = mem.u64(interp.runtime + lay.rt_interp_head)
    while it and len(out) < MAX_THREADS:
        ts = mem.u64(it + lay.interp_threads)
        while ts and len(out) < MAX_THREADS:
            out.append(ts)
            ts = mem.u64(ts + lay.ts_next)
        it = mem.u64(it + lay.interp_next)
    return out


def find_thread(mem: ProcessMemory, interp: Interpreter, *, thread_id: int | None = None,
                native_id: int | None = None) -> int | None:
    """The thread state whose thread_id (pthread_self()) or native thread id matches."""
    lay = interp.layout
    for ts in thread_states(mem, interp):
        if thread_id is not None and mem.u64(ts + lay.ts_thread_id) == thread_id:
            return ts
        if native_id is not None and lay.ts_native_thread_id is not None:
            raw = mem.read(ts + lay.ts_native_thread_id, 8)
            if raw is not None and struct.unpack("<Q", raw)[0] == native_id:
                return ts
    return None


def frames(mem: ProcessMemory, interp: Interpreter, tstate: int,
           limit: int = R.PY_MAX_FRAMES) -> list[tuple[int, int, int]]:
    """(code, instruction byte offset, checksum) per frame, innermost first."""
    lay = interp.layout
    reader = CodeReader(mem, lay, interp.code_type)
    f = mem.u64(tstate + lay.ts_frame)
    if f and lay.cframe_frame is not None:
        f = mem.u64(f + lay.cframe_frame)
    out = []
    while f and len(out) < limit:
        code, prev = mem.u64(f + lay.fr_code), mem.u64(f + lay.fr_previous)
        if code is None or prev is None:
            break
        if lay.fr_owner is not None:
            owner = mem.read(f + lay.fr_owner, 1)
            if owner is not None and lay.owner_cstack is not None and owner[0] == lay.owner_cstack:
                f = prev
                continue
        if lay.instr_index:
            raw = mem.read(f + lay.fr_instr, 4)
            lasti = struct.unpack("<i", raw)[0] if raw else -1
            instr = NOT_STARTED if lasti < 0 else lasti * 2
        else:
            ip, first = mem.u64(f + lay.fr_instr) or 0, code + lay.co_code
            instr = ip - first if first <= ip < first + NOT_STARTED else NOT_STARTED
        fields = reader.fields(code)
        out.append((code, instr, fields["check"] if fields else 0))
        f = prev
    return out


def stack(interp: Interpreter, **thread) -> list[tuple[str, str, int]] | None:
    """(function, file, line) per frame, innermost first; None: no such thread."""
    mem = ProcessMemory(interp.pid)
    ts = find_thread(mem, interp, **thread)
    if ts is None:
        return None
    reader = CodeReader(mem, interp.layout, interp.code_type)
    out = []
    for code, instr, check in frames(mem, interp, ts):
        info = reader.resolve(code, check)
        out.append((info.name, info.filename, info.line(instr)) if info else ("?", "?", 0))
    return out
