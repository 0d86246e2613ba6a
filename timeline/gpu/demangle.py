"""Kernel names as people read them: C++ demangling through libstdc++'s own __cxa_demangle.

libstdc++ is on every Linux that runs CUDA, so calling it over ctypes needs no new dependency
(the `cxxfilt` package is a wrapper around the same function).  Names are few (one per kernel),
so one call per distinct name is fine; results are cached.
"""
import ctypes
import ctypes.util
import functools

_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
try:
    _cxx = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
    _demangle = _cxx.__cxa_demangle
    _demangle.restype = ctypes.c_void_p
    _demangle.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
except (OSError, AttributeError):
    _demangle = None


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """The demangled form of a mangled C++ name; anything else (C names, garbage) comes back unchanged."""
    if _demangle is None or not name.startswith("_Z") or "\0" in name:
        return name
    status = ctypes.c_int(0)
    ptr = _demangle(name.encode("utf-8", "replace"), None, None, ctypes.byref(status))
    if not ptr:
        return name
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace") if status.value == 0 else name
    finally:
        _libc.free(ptr)
