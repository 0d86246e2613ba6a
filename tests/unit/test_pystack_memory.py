"""ProcessMemory.read_many: many spans in one process_vm_readv, and what a span
the kernel cannot read costs (only itself), on this process's own memory."""
import ctypes
import mmap
import os

from timeline.pystack import memory
from timeline.pystack.memory import ProcessMemory

PAGE = mmap.PAGESIZE


def _pages(n: int):
    """n pages filled with their own numbers, and the address of the first."""
    m = mmap.mmap(-1, n * PAGE)
    for i in range(n):
        m[i * PAGE:(i + 1) * PAGE] = bytes([i + 1]) * PAGE
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))


def test_spans_read_in_one_call_each_its_own_bytes():
    m, base = _pages(4)
    mem = ProcessMemory(os.getpid())
    spans = [(base + i * PAGE + 10, 100) for i in range(4)] + [(base + PAGE - 8, 16), None, (0, 8), (base, 0)]
    got = mem.read_many(spans)
    assert got[:4] == [bytes([i + 1]) * 100 for i in range(4)]
    assert got[4] == b"\x01" * 8 + b"\x02" * 8   # across a page boundary
    assert got[5:] == [None, None, None]         # no span, a null address, nothing to read
    assert mem.reads == 1
    del got
    m.close()


def test_an_unreadable_span_costs_only_itself(monkeypatch):
    m, base = _pages(3)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mprotect(ctypes.c_void_p(base + PAGE), PAGE, 0) == 0  # the middle page: PROT_NONE
    try:
        mem = ProcessMemory(os.getpid())
        spans = [(base, 64), (base + PAGE, 64), (base + 2 * PAGE, 64), (base + PAGE - 32, 64), (base + 8, 8)]
        got = mem.read_many(spans)
        assert got == [b"\x01" * 64, None, b"\x03" * 64, None, b"\x01" * 8]
        # batches of at most BATCH_IOVECS spans: the same answers
        monkeypatch.setattr(memory, "BATCH_IOVECS", 2)
        assert ProcessMemory(os.getpid()).read_many(spans) == got
    finally:
        libc.mprotect(ctypes.c_void_p(base + PAGE), PAGE, 3)
        m.close()


def test_a_gone_process_reads_nothing():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    _, base = _pages(1)
    assert ProcessMemory(pid).read_many([(base, 8)] * 3) == [None, None, None]
