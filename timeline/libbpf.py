"""A thin ctypes binding over the system libbpf (Debian ``libbpf1``, >= 1.0).

Only what timeline needs: open/load objects, set read-only globals before
load, share maps between objects, attach tracepoints and uprobes, map access
and clean teardown.  Ring buffers are read by :mod:`timeline.ring_reader`
straight from their mmap, not through libbpf callbacks.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno as _errno
import os
import threading

c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_size_t = ctypes.c_size_t

MIN_VERSION = (1, 0)


class BPFError(Exception):
    """A libbpf or bpf() failure; libbpf's own log lines are kept apart in `log`
    (shown with TIMELINE_DEBUG=1) so the message stays one line."""

    def __init__(self, msg: str, log: str = ""):
        super().__init__(msg)
        self.log = log


class LibbpfMissing(BPFError):
    pass


class bpf_uprobe_opts(ctypes.Structure):
    # libbpf 1.1 layout; `sz` lets newer libbpf accept it (forward compatible).
    _fields_ = [
        ("sz", c_size_t),
        ("ref_ctr_offset", c_size_t),
        ("bpf_cookie", ctypes.c_uint64),
        ("retprobe", ctypes.c_bool),
        ("func_name", c_char_p),
    ]


_PRINT_FN = ctypes.CFUNCTYPE(c_int, c_int, c_char_p, c_void_p)
_lib = None
_lib_lock = threading.Lock()
_log: list[str] = []
_libc = ctypes.CDLL(None, use_errno=True)
_libc.vsnprintf.argtypes = [c_char_p, c_size_t, c_char_p, c_void_p]


@_PRINT_FN
def _print_cb(level, fmt, va_list):
    # va_list on x86-64 is passed as a pointer, so libc can format it for us.
    buf = ctypes.create_string_buffer(1 << 16)  # verifier logs come as one big line
    _libc.vsnprintf(buf, len(buf), fmt, va_list)
    line = buf.value.decode("utf-8", "replace").rstrip("\n")
    _log.append(line)
    if len(_log) > 400:
        del _log[:200]
    return 0


def _sig(lib, name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


def lib():
    """Load libbpf once; raise LibbpfMissing with an install hint."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        name = os.environ.get("TIMELINE_LIBBPF") or "libbpf.so.1"
        try:
            L = ctypes.CDLL(name, use_errno=True)
        except OSError:
            found = ctypes.util.find_library("bpf")
            if not found:
                raise LibbpfMissing(
                    "libbpf.so.1 not found: install libbpf 1.x (Debian/Ubuntu: apt-get install libbpf1)"
                ) from None
            L = ctypes.CDLL(found, use_errno=True)
        try:
            _sig(L, "libbpf_major_version", ctypes.c_uint32)
            _sig(L, "libbpf_minor_version", ctypes.c_uint32)
            ver = (L.libbpf_major_version(), L.libbpf_minor_version())
        except AttributeError:
            ver = (0, 0)
        if ver < MIN_VERSION:
            raise LibbpfMissing(f"libbpf {ver[0]}.{ver[1]} is too old: timeline needs libbpf >= 1.0")
        _sig(L, "libbpf_set_print", c_void_p, _PRINT_FN)
        _sig(L, "bpf_object__open_file", c_void_p, c_char_p, c_void_p)
        _sig(L, "bpf_object__load", c_int, c_void_p)
        _sig(L, "bpf_object__close", None, c_void_p)
        _sig(L, "bpf_object__find_map_by_name", c_void_p, c_void_p, c_char_p)
        _sig(L, "bpf_object__find_program_by_name", c_void_p, c_void_p, c_char_p)
        _sig(L, "bpf_object__next_program", c_void_p, c_void_p, c_void_p)
        _sig(L, "bpf_object__next_map", c_void_p, c_void_p, c_void_p)
        _sig(L, "bpf_program__name", c_char_p, c_void_p)
        _sig(L, "bpf_program__section_name", c_char_p, c_void_p)
        _sig(L, "bpf_program__set_autoload", c_int, c_void_p, ctypes.c_bool)
        _sig(L, "bpf_program__attach", c_void_p, c_void_p)
        _sig(L, "bpf_program__attach_uprobe_opts", c_void_p, c_void_p, c_int, c_char_p, c_size_t,
             ctypes.POINTER(bpf_uprobe_opts))
        _sig(L, "bpf_link__destroy", c_int, c_void_p)
        _sig(L, "bpf_map__name", c_char_p, c_void_p)
        _sig(L, "bpf_map__fd", c_int, c_void_p)
        _sig(L, "bpf_map__reuse_fd", c_int, c_void_p, c_int)
        _sig(L, "bpf_map__set_max_entries", c_int, c_void_p, ctypes.c_uint32)
        _sig(L, "bpf_map__max_entries", ctypes.c_uint32, c_void_p)
        _sig(L, "bpf_map__key_size", ctypes.c_uint32, c_void_p)
        _sig(L, "bpf_map__value_size", ctypes.c_uint32, c_void_p)
        _sig(L, "bpf_map__initial_value", c_void_p, c_void_p, ctypes.POINTER(c_size_t))
        _sig(L, "bpf_map_update_elem", c_int, c_int, c_void_p, c_void_p, ctypes.c_uint64)
        _sig(L, "bpf_map_lookup_elem", c_int, c_int, c_void_p, c_void_p)
        _sig(L, "bpf_map_delete_elem", c_int, c_int, c_void_p)
        _sig(L, "bpf_map_get_next_key", c_int, c_int, c_void_p, c_void_p)
        _sig(L, "libbpf_num_possible_cpus", c_int)
        L.libbpf_set_print(_print_cb)
        L.version = ver
        _lib = L
        return L


def _fail(what: str, err: int | None = None) -> BPFError:
    err = abs(err) if err else ctypes.get_errno()
    tail = "\n".join(_log[-30:])
    _log.clear()
    msg = f"{what}: {os.strerror(err) if err else 'failed'}"
    if err in (_errno.EPERM, _errno.EACCES):
        msg += " (loading eBPF needs root: CAP_BPF and CAP_PERFMON)"
    return BPFError(msg, tail)


def num_possible_cpus() -> int:
    n = lib().libbpf_num_possible_cpus()
    if n <= 0:
        raise _fail("libbpf_num_possible_cpus", n)
    return n


class Map:
    def __init__(self, ptr: int, obj: "BPFObject"):
        self.ptr = ptr
        self._obj = obj  # keep the object (and so the map) alive
        L = lib()
        self.name = L.bpf_map__name(ptr).decode()
        self.key_size = L.bpf_map__key_size(ptr)
        self.value_size = L.bpf_map__value_size(ptr)

    @property
    def fd(self) -> int:
        return lib().bpf_map__fd(self.ptr)

    @property
    def max_entries(self) -> int:
        return lib().bpf_map__max_entries(self.ptr)

    def set_max_entries(self, n: int) -> None:
        if lib().bpf_map__set_max_entries(self.ptr, n):
            raise _fail(f"set max_entries of map {self.name}")

    def reuse_fd(self, fd: int) -> None:
        err = lib().bpf_map__reuse_fd(self.ptr, fd)
        if err:
            raise _fail(f"share map {self.name}", err)

    def update(self, key: bytes, value: bytes, flags: int = 0) -> None:
        if lib().bpf_map_update_elem(self.fd, key, value, flags):
            raise _fail(f"update map {self.name}")

    def lookup(self, key: bytes, value_size: int | None = None) -> bytes | None:
        buf = ctypes.create_string_buffer(value_size or self.value_size)
        if lib().bpf_map_lookup_elem(self.fd, key, buf):
            if ctypes.get_errno() == _errno.ENOENT:
                return None
            raise _fail(f"lookup in map {self.name}")
        return buf.raw

    def delete(self, key: bytes) -> bool:
        if lib().bpf_map_delete_elem(self.fd, key):
            if ctypes.get_errno() == _errno.ENOENT:
                return False
            raise _fail(f"delete from map {self.name}")
        return True

    def items(self, value_size: int | None = None, limit: int = 65536) -> list[tuple[bytes, bytes]]:
        """(key, value) byte pairs of a hash map, at most `limit`.  Entries may
        change while we walk: that costs an entry or a repeat, never an error.
        value_size: for per-CPU maps, the value bytes of all CPUs."""
        L, fd = lib(), self.fd
        cur, nxt = None, ctypes.create_string_buffer(self.key_size)
        out = []
        while len(out) < limit and L.bpf_map_get_next_key(fd, cur, nxt) == 0:
            key = nxt.raw
            val = self.lookup(key, value_size)
            if val is not None:
                out.append((key, val))
            cur = ctypes.create_string_buffer(key, self.key_size)
        return out


class Link:
    def __init__(self, ptr: int, what: str):
        self.ptr = ptr
        self.what = what

    def destroy(self) -> None:
        if self.ptr:
            lib().bpf_link__destroy(self.ptr)
            self.ptr = None


class BPFObject:
    """One opened (then loaded) .bpf.o file."""

    def __init__(self, path: str):
        L = lib()
        self.path = path
        if not os.path.exists(path):
            raise BPFError(f"BPF object {path} not found (build it: python -m timeline.bpf.build)")
        ptr = L.bpf_object__open_file(path.encode(), None)
        if not ptr:
            raise _fail(f"open {os.path.basename(path)}")
        self.ptr = ptr
        self.loaded = False
        self.links: list[Link] = []

    def map(self, name: str) -> Map:
        ptr = lib().bpf_object__find_map_by_name(self.ptr, name.encode())
        if not ptr:
            raise BPFError(f"{os.path.basename(self.path)} has no map {name!r}")
        return Map(ptr, self)

    def map_names(self) -> list[str]:
        L, out, m = lib(), [], None
        while True:
            m = L.bpf_object__next_map(self.ptr, m)
            if not m:
                return out
            out.append(L.bpf_map__name(m).decode())

    def program(self, name: str) -> int:
        ptr = lib().bpf_object__find_program_by_name(self.ptr, name.encode())
        if not ptr:
            raise BPFError(f"{os.path.basename(self.path)} has no program {name!r}")
        return ptr

    def programs(self) -> dict[str, str]:
        """name -> section of every program in the object."""
        L, out, p = lib(), {}, None
        while True:
            p = L.bpf_object__next_program(self.ptr, p)
            if not p:
                return out
            out[L.bpf_program__name(p).decode()] = L.bpf_program__section_name(p).decode()

    def set_autoload(self, name: str, on: bool) -> None:
        lib().bpf_program__set_autoload(self.program(name), on)

    def set_rodata(self, values: dict[str, tuple[int, int, int]]) -> None:
        """Write `const volatile` globals before load.

        values: name -> (offset in .rodata, size in bytes, value).  Offsets
        come from the object's BTF (see timeline.btf_layout).
        """
        L = lib()
        m = self._internal_map(".rodata")
        size = c_size_t(0)
        base = L.bpf_map__initial_value(m, ctypes.byref(size))
        if not base:
            raise BPFError(f"{os.path.basename(self.path)}: .rodata is not accessible")
        for name, (off, sz, val) in values.items():
            if off + sz > size.value:
                raise BPFError(f".rodata variable {name} lies outside the section")
            ctypes.memmove(base + off, int(val).to_bytes(sz, "little", signed=val < 0), sz)

    def _internal_map(self, suffix: str) -> int:
        L, m = lib(), None
        while True:
            m = L.bpf_object__next_map(self.ptr, m)
            if not m:
                raise BPFError(f"{os.path.basename(self.path)} has no {suffix} section")
            if L.bpf_map__name(m).decode().endswith(suffix):
                return m

    def load(self) -> None:
        err = lib().bpf_object__load(self.ptr)
        if err:
            raise _fail(f"load {os.path.basename(self.path)}", err)
        self.loaded = True

    def attach(self, name: str) -> Link:
        """Attach by the program's SEC() (tracepoints, tp_btf)."""
        ptr = lib().bpf_program__attach(self.program(name))
        if not ptr:
            raise _fail(f"attach {name}")
        link = Link(ptr, name)
        self.links.append(link)
        return link

    def attach_uprobe(self, name: str, binary: str, *, func_name: str | None = None, offset: int = 0,
                      pid: int = -1, retprobe: bool = False, cookie: int = 0) -> Link:
        opts = bpf_uprobe_opts(sz=ctypes.sizeof(bpf_uprobe_opts), ref_ctr_offset=0, bpf_cookie=cookie,
                               retprobe=retprobe, func_name=func_name.encode() if func_name else None)
        ptr = lib().bpf_program__attach_uprobe_opts(self.program(name), pid, binary.encode(), offset,
                                                    ctypes.byref(opts))
        if not ptr:
            raise _fail(f"attach uprobe {name} to {binary}:{func_name or hex(offset)}")
        link = Link(ptr, f"{name}@{binary}:{func_name or hex(offset)}")
        self.links.append(link)
        return link

    def detach_all(self) -> None:
        for link in self.links:
            link.destroy()
        self.links.clear()

    def close(self) -> None:
        self.detach_all()
        if self.ptr:
            lib().bpf_object__close(self.ptr)
            self.ptr = None
