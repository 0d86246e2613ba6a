"""C++ names as people read them (CUDA kernels in call slices and GPU activity).

Demangling goes through libstdc++'s own __cxa_demangle over ctypes: libstdc++ is
on every Linux that runs CUDA, so this needs no new dependency (the `cxxfilt`
package wraps the same function). One call per distinct name, cached; the
library is loaded on first use, not at import.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

_demangler = None  # None: not looked up yet; False: no libstdc++
_free = ctypes.CDLL(None).free
_free.argtypes = [ctypes.c_void_p]


def _cxa_demangle():
    for name in ("libstdc++.so.6", ctypes.util.find_library("stdc++")):
        if not name:
            continue
        try:
            fn = ctypes.CDLL(name).__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        return fn
    return False


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """A mangled (Itanium ABI) C++ name demangled; anything else (C names,
    garbage, names with NUL) comes back unchanged."""
    global _demangler
    if not name.startswith("_Z") or "\0" in name:
        return name
    if _demangler is None:
        _demangler = _cxa_demangle()
    if not _demangler:
        return name
    status = ctypes.c_int(0)
    ptr = _demangler(name.encode("utf-8", "replace"), None, None, ctypes.byref(status))
    if not ptr:
        return name
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace") if status.value == 0 else name
    finally:
        _free(ptr)
