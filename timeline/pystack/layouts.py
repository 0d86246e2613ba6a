"""Where CPython keeps what a stack walk needs, per minor version.

The offsets below come from each version's own headers (Include/internal/
pycore_runtime.h, pycore_interp.h, pycore_frame.h, cpython/pystate.h,
cpython/code.h; offsetof() compiled against the installed headers of
3.10.13, 3.11.7, 3.12.1 and 3.13.0) and are checked against the running
interpreters by tests/system/test_pystack_layouts.py, which reads a known frame of
a live process with process_vm_readv.  They are stable within a minor
version (CPython keeps these structs' layouts fixed in bug-fix releases).

3.13 and later publish their own offsets at the start of _PyRuntime
(_Py_DebugOffsets, cookie "xdebugpy"): those are read from the process and
take precedence (`from_debug_offsets`); the table entry for 3.13 fills what
they do not carry (co_version) and serves as the cross-check.

How the walk goes (pystack.bpf.c does it in the kernel, walk.py in Python):
  _PyRuntime + rt_interp_head -> PyInterpreterState (then + interp_next)
  interp + interp_threads -> PyThreadState (then + ts_next), the one whose
      thread_id (pthread_self()) is the thread's
  3.10: tstate->frame, a PyFrameObject chain through f_back; f_lasti counts
      code units
  3.11, 3.12: tstate->cframe->current_frame, a _PyInterpreterFrame chain
      through previous; prev_instr points into the code object's bytecode
      (co_code_adaptive, inline in the code object)
  3.12, 3.13: frames owned by the C stack (owner 3) are shims, skipped
  3.13: tstate->current_frame; instr_ptr
"""
from __future__ import annotations

import dataclasses
import struct

import numpy as np

from . import records as R

SUPPORTED = (10, 11, 12, 13)


@dataclasses.dataclass(frozen=True)
class Layout:
    minor: int
    # runtime and interpreter
    rt_interp_head: int
    interp_next: int
    interp_threads: int
    # thread state
    ts_next: int
    ts_thread_id: int           # pthread_self() of the thread
    ts_native_thread_id: int | None  # the kernel tid (3.11+)
    ts_frame: int               # frame (3.10) / cframe (3.11, 3.12) / current_frame (3.13)
    cframe_frame: int | None    # _PyCFrame.current_frame (3.11, 3.12)
    # frames
    fr_code: int
    fr_previous: int
    fr_instr: int               # f_lasti (3.10, int) / prev_instr / instr_ptr
    fr_owner: int | None
    owner_cstack: int | None    # owner value of C-stack shim frames
    instr_index: bool           # fr_instr is an index of code units (3.10), not a pointer
    ts_datastack: int | None    # datastack_chunk, then datastack_top (3.11+: frames live in chunks)
    # code objects
    co_firstlineno: int
    co_version: int | None      # a counter unique per code object (3.12+)
    co_filename: int
    co_name: int
    co_qualname: int | None     # 3.11+
    co_linetable: int
    co_code: int                # 3.10: the co_code bytes object; 3.11+: offset of the inline bytecode
    # objects
    ob_type: int = 8
    str_hash: int = 24
    str_length: int = 16
    str_state: int = 32
    ascii_size: int = 48        # sizeof(PyASCIIObject): where a compact ASCII string's data starts
    compact_size: int = 72      # sizeof(PyCompactUnicodeObject): a compact non-ASCII string's data
    bytes_size: int = 16        # ob_size of a bytes object
    bytes_data: int = 32        # ob_sval
    debug_offsets: bool = False  # came from the process's _Py_DebugOffsets
    chunk_data: int = 24        # _PyStackChunk.data: the first frame of a chunk

    def bpf_config(self, runtime: int, gen: int = 0, code_cache: bool = False) -> bytes:
        """struct tl_py_proc for the py_procs map: gen numbers the entry (per-image
        caches are keyed by it), code_cache says code_dealloc is probed."""
        none = R.PY_NONE
        fr = [o for o in (self.fr_code, self.fr_previous, self.fr_instr, self.fr_owner) if o is not None]
        fr_base = min(fr)
        co = [o for o in (self.co_firstlineno, self.co_version, self.co_filename, self.co_name) if o is not None]
        co_base = min(co)
        rel = lambda off, base, size: none if off is None else off - base  # noqa: E731
        c = np.zeros((), R.PY_PROC)
        c["runtime"] = runtime
        c["rt_interp_head"], c["interp_next"], c["interp_threads"] = self.rt_interp_head, self.interp_next, self.interp_threads
        c["ts_next"], c["ts_thread_id"], c["ts_frame"] = self.ts_next, self.ts_thread_id, self.ts_frame
        c["cframe_frame"] = none if self.cframe_frame is None else self.cframe_frame
        c["fr_base"] = fr_base
        c["fr_code"], c["fr_previous"] = self.fr_code - fr_base, self.fr_previous - fr_base
        c["fr_instr"], c["fr_owner"] = self.fr_instr - fr_base, rel(self.fr_owner, fr_base, 1)
        c["co_base"] = co_base
        c["co_firstlineno"], c["co_version"] = self.co_firstlineno - co_base, rel(self.co_version, co_base, 4)
        c["co_name"], c["co_filename"] = self.co_name - co_base, self.co_filename - co_base
        c["co_code"] = 0 if self.instr_index else self.co_code
        c["str_hash"] = self.str_hash
        c["instr_kind"] = R.PY_INSTR_INDEX if self.instr_index else R.PY_INSTR_PTR
        c["owner_skip"] = 255 if self.owner_cstack is None else self.owner_cstack
        c["ts_datastack"] = none if self.ts_datastack is None else self.ts_datastack
        c["chunk_data"] = self.chunk_data
        c["gen"] = gen & 0xFFFFFFFF
        c["code_cache"] = int(code_cache)
        c["str_length"], c["str_state"] = self.str_length, self.str_state
        c["str_ascii"], c["str_compact"] = self.ascii_size, self.compact_size
        ts = [(self.ts_thread_id, 8), (self.ts_frame, 8)] + ([(self.ts_datastack, 16)] if self.ts_datastack is not None else [])
        if max(o + n for o, n in ts) - min(o for o, _ in ts) > R.PY_TSWIN:
            raise ValueError(f"CPython 3.{self.minor}: the thread state's fields span more than {R.PY_TSWIN} bytes")
        for name, size in (("fr_code", 8), ("fr_previous", 8), ("fr_instr", 8 if not self.instr_index else 4),
                           ("fr_owner", 1), ("co_firstlineno", 4), ("co_version", 4), ("co_name", 8),
                           ("co_filename", 8)):
            v = int(c[name])
            if v != none and v + size > R.PY_WINDOW:
                raise ValueError(f"CPython 3.{self.minor}: {name} lies outside the {R.PY_WINDOW}-byte window")
        return c.tobytes()


TABLE: dict[int, Layout] = {
    10: Layout(10, rt_interp_head=32, interp_next=0, interp_threads=8,
               ts_next=8, ts_thread_id=176, ts_native_thread_id=None, ts_frame=24, cframe_frame=None,
               fr_code=32, fr_previous=24, fr_instr=96, fr_owner=None, owner_cstack=None, instr_index=True,
               ts_datastack=None,
               co_firstlineno=40, co_version=None, co_filename=104, co_name=112, co_qualname=None,
               co_linetable=120, co_code=48),
    11: Layout(11, rt_interp_head=40, interp_next=0, interp_threads=16,
               ts_next=8, ts_thread_id=152, ts_native_thread_id=160, ts_frame=56, cframe_frame=8,
               fr_code=32, fr_previous=48, fr_instr=56, fr_owner=69, owner_cstack=None, instr_index=False,
               ts_datastack=296,
               co_firstlineno=72, co_version=None, co_filename=112, co_name=120, co_qualname=128,
               co_linetable=136, co_code=184),
    12: Layout(12, rt_interp_head=40, interp_next=0, interp_threads=72,
               ts_next=8, ts_thread_id=136, ts_native_thread_id=144, ts_frame=56, cframe_frame=0,
               fr_code=0, fr_previous=8, fr_instr=56, fr_owner=70, owner_cstack=3, instr_index=False,
               ts_datastack=232,
               co_firstlineno=68, co_version=92, co_filename=112, co_name=120, co_qualname=128,
               co_linetable=136, co_code=192, ascii_size=40, compact_size=56),
    13: Layout(13, rt_interp_head=632, interp_next=7264, interp_threads=7344,
               ts_next=8, ts_thread_id=152, ts_native_thread_id=160, ts_frame=72, cframe_frame=None,
               fr_code=0, fr_previous=8, fr_instr=56, fr_owner=70, owner_cstack=3, instr_index=False,
               ts_datastack=232,
               co_firstlineno=68, co_version=92, co_filename=112, co_name=120, co_qualname=128,
               co_linetable=136, co_code=200, ascii_size=40, compact_size=56),
}

DEBUG_COOKIE = b"xdebugpy"
DEBUG_OFFSETS_SIZE = 73 * 8  # struct _Py_DebugOffsets of 3.13: 73 uint64 fields


class LayoutError(ValueError):
    """The interpreter cannot be walked (its version, its build): one line why."""


def from_debug_offsets(raw: bytes, minor: int) -> Layout:
    """The layout of a 3.13 process from the _Py_DebugOffsets at the start of
    its _PyRuntime (Include/internal/pycore_runtime.h)."""
    if len(raw) < DEBUG_OFFSETS_SIZE or raw[:8] != DEBUG_COOKIE:
        raise LayoutError("no _Py_DebugOffsets at the start of _PyRuntime")
    v = struct.unpack_from("<73Q", raw)
    version = v[1]
    if (version >> 24, (version >> 16) & 0xFF) != (3, minor):
        raise LayoutError(f"_Py_DebugOffsets says version {version >> 24}.{(version >> 16) & 0xFF}")
    if v[2]:
        raise LayoutError("a free-threaded build (no GIL): its frames and thread states are laid out otherwise")
    if minor != 13:
        raise LayoutError(f"_Py_DebugOffsets of 3.{minor} are not known to this version of timeline")
    base = TABLE[13]
    return dataclasses.replace(
        base, rt_interp_head=v[5], interp_next=v[8], interp_threads=v[9],
        ts_next=v[21], ts_frame=v[23], ts_thread_id=v[24], ts_native_thread_id=v[25], ts_datastack=v[26],
        fr_previous=v[29], fr_code=v[30], fr_instr=v[31], fr_owner=v[33],
        co_filename=v[35], co_name=v[36], co_qualname=v[37], co_linetable=v[38], co_firstlineno=v[39],
        co_version=v[39] + (base.co_version - base.co_firstlineno),  # not published: beside co_firstlineno
        co_code=v[43], ob_type=v[45], bytes_size=v[65], bytes_data=v[66], str_state=v[68], str_length=v[69],
        ascii_size=v[70], debug_offsets=True)


def for_version(major: int, minor: int) -> Layout:
    if major != 3 or minor not in TABLE:
        raise LayoutError(f"CPython {major}.{minor} is not supported "
                          f"(3.{SUPPORTED[0]} to 3.{SUPPORTED[-1]} are)")
    return TABLE[minor]
