"""Native trace_processor_shell, driven over its HTTP RPC (`-D --http-port`).

This is the same protocol the `perfetto` package's TraceProcessor uses; we
talk it directly (a handful of POSTs) so the binary is only ever the one we
found, never one fetched by perfetto's auto-download, and so the replies are
raw QueryResult protos decoded by the same code as the wasm engine's.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Optional

from ._common import BaseTraceProcessor, TraceLoadError, TraceProcessorError, protos

ENV_BIN = "TIMELINE_TP_BIN"


# --------------------------------------------------------------------------
# Finding a binary (never downloads)
# --------------------------------------------------------------------------

def _perfetto_prebuilt_dir() -> str:
    # Where perfetto.prebuilts.perfetto_prebuilts.download_or_get_cached()
    # keeps what it downloaded: ~/.local/share/perfetto/prebuilts/<name>-<sha16>
    return os.path.join(os.path.expanduser("~"), ".local", "share", "perfetto", "prebuilts")


def _perfetto_cached_shell() -> Optional[str]:
    """trace_processor_shell already downloaded by the perfetto package, if any."""
    d = _perfetto_prebuilt_dir()
    if not os.path.isdir(d):
        return None
    # Prefer the version pinned by the installed perfetto package ...
    try:
        import platform as _platform
        from perfetto.prebuilts.manifests.trace_processor_shell import TRACE_PROCESSOR_SHELL_MANIFEST

        plat, machine = sys.platform.lower(), _platform.machine().lower()
        for e in TRACE_PROCESSOR_SHELL_MANIFEST:
            if e.get("platform") == plat and machine in e.get("machine", []) and e.get("sha256"):
                root, ext = os.path.splitext(e["file_name"])
                p = os.path.join(d, f"{root}-{e['sha256'][:16]}{ext}")
                if _is_exe(p):
                    return p
    except Exception:  # manifest layout changed: fall through to any cached copy
        pass
    # ... else any other cached version (newest first); skip partial downloads.
    cands = [os.path.join(d, n) for n in os.listdir(d)
             if n.startswith("trace_processor_shell-") and not n.endswith(".tmp")]
    cands = [p for p in cands if _is_exe(p)]
    return max(cands, key=os.path.getmtime) if cands else None


def _is_exe(p: str) -> bool:
    return os.path.isfile(p) and os.access(p, os.X_OK)


def find_trace_processor_shell(bin_path: Optional[str] = None) -> Optional[str]:
    """Path of a usable trace_processor_shell, or None.

    Order: explicit `bin_path`, $TIMELINE_TP_BIN, the perfetto package's
    download cache, `trace_processor_shell` on PATH. An explicitly named
    binary that doesn't exist is an error rather than silently skipped.
    (The `trace_processor` wrapper script is deliberately not used: it
    downloads the real binary on first run.)
    """
    for explicit, what in ((bin_path, "bin_path"), (os.environ.get(ENV_BIN) or None, f"${ENV_BIN}")):
        if explicit is not None:
            explicit = os.path.expanduser(os.fspath(explicit))
            if not _is_exe(explicit):
                raise TraceProcessorError(f"{what}={explicit!r} is not an executable trace_processor_shell")
            return explicit
    return _perfetto_cached_shell() or shutil.which("trace_processor_shell")


# --------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NativeTraceProcessor(BaseTraceProcessor):
    engine_name = "native"

    def __init__(self, bin_path: str, startup_timeout: float = 30.0):
        super().__init__()
        self.bin_path = bin_path
        self._log = tempfile.TemporaryFile()
        self._port = _free_port()
        try:
            self._proc = subprocess.Popen(
                [bin_path, "-D", "--http-port", str(self._port)],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                start_new_session=True)  # keep terminal signals (Ctrl-C) for us
        except OSError as e:
            self._log.close()
            raise TraceProcessorError(f"cannot run {bin_path!r}: {e.strerror or e}") from None
        self._conn: Optional[http.client.HTTPConnection] = None
        deadline = time.monotonic() + startup_timeout
        while True:
            if self._proc.poll() is not None:
                out = self._log_tail()
                self._shutdown()
                raise TraceProcessorError(f"{bin_path} exited with code {self._proc.returncode} at startup"
                                          + (f":\n{out}" if out else ""))
            try:
                self._request("GET", "/status", timeout=2)
                break
            except (OSError, http.client.HTTPException):
                self._conn = None
                if time.monotonic() > deadline:
                    self._shutdown()
                    raise TraceProcessorError(f"{bin_path} did not start its HTTP RPC server "
                                              f"within {startup_timeout:.0f}s") from None
                time.sleep(0.05)

    def _log_tail(self, n: int = 10) -> str:
        try:
            self._log.seek(0)
            lines = self._log.read().decode("utf-8", "replace").strip().splitlines()
            return "\n".join(lines[-n:])
        except (OSError, ValueError):
            return ""

    def _request(self, method: str, path: str, body: Optional[bytes] = None,
                 timeout: Optional[float] = None) -> bytes:
        if self._conn is None:
            self._conn = http.client.HTTPConnection("localhost", self._port, timeout=timeout)
        self._conn.timeout = timeout
        if self._conn.sock is not None:
            self._conn.sock.settimeout(timeout)
        self._conn.request(method, path, body=body)
        with self._conn.getresponse() as r:
            data = r.read()
            if r.status != 200:
                raise TraceProcessorError(f"trace_processor_shell {path}: HTTP {r.status} {data[:200]!r}")
            return data

    def _call(self, method: str, path: str, body: Optional[bytes] = None) -> bytes:
        try:
            return self._request(method, path, body)
        except (OSError, http.client.HTTPException) as e:
            self._conn = None
            dead = self._proc.poll() is not None
            out = self._log_tail()
            raise TraceProcessorError(
                f"trace_processor_shell {'died' if dead else 'RPC failed'} during {path}: {e}"
                + (f"\n{out}" if out else "")) from None

    def _append(self, chunk: bytes) -> str:
        res = protos().AppendTraceDataResult()
        try:
            res.ParseFromString(self._call("POST", "/parse", chunk))
        except TraceProcessorError as e:
            raise TraceLoadError(str(e)) from None
        return res.error

    def _finalize(self) -> None:
        try:
            self._call("GET", "/notify_eof")
        except TraceProcessorError as e:
            raise TraceLoadError(str(e)) from None

    def _query_proto(self, sql: str):
        P = protos()
        qr = P.QueryResult()
        # /query answers with all batches of the result concatenated, which
        # protobuf parsing merges into one QueryResult.
        qr.ParseFromString(self._call("POST", "/query", P.QueryArgs(sql_query=sql).SerializeToString()))
        return qr

    def _shutdown(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if not self._log.closed:
            self._log.close()


def open_native(path, bin_path: str, fd: Optional[int] = None) -> NativeTraceProcessor:
    """Loads `path` (or the descriptor `fd` on it) into a new trace_processor_shell subprocess."""
    return NativeTraceProcessor(bin_path).loaded(path, fd)
