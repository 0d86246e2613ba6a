"""`timeline view` hands the browser a private file, not the tokenized URL:
a command line is readable by every local user (ps), the file is 0600 in a
0700 directory, sends the browser on to the URL, and is gone when the viewer
stops (issue 20).  The browser is a stand-in named by $BROWSER that records
its argv; the last test opens the file in a real headless Chromium."""
from __future__ import annotations

import html
import json
import os
import re
import signal
import stat
import tempfile
import time
import urllib.parse

import pytest

from test_view import SAMPLE, Browser, Viewer, _expected_tracks

FAKE_BROWSER = """#!/bin/sh
printf '%s\\n' "$@" > "$ARGV_FILE.tmp" && mv "$ARGV_FILE.tmp" "$ARGV_FILE"
"""


class ViewerWithBrowser(Viewer):
    """`timeline view TRACE` (a browser opened) with TMPDIR of its own."""

    def __init__(self, tmp_path, *args: str, tmpdir_usable: bool = True):
        self.tmpdir = tmp_path / "tmp"
        if tmpdir_usable:
            self.tmpdir.mkdir()
        else:
            self.tmpdir.write_text("a file, not a directory")
        browser = tmp_path / "fake-browser"
        browser.write_text(FAKE_BROWSER)
        browser.chmod(0o755)
        self.argv_file = tmp_path / "argv"
        env = {**os.environ, "BROWSER": str(browser), "ARGV_FILE": str(self.argv_file), "TMPDIR": str(self.tmpdir)}
        super().__init__(SAMPLE, *args, env=env, browser=True)
        self.token = urllib.parse.urlsplit(self.url).path.split("/")[1]

    def browser_argv(self, timeout: float = 30) -> list[str]:
        deadline = time.monotonic() + timeout
        while not self.argv_file.exists():
            assert time.monotonic() < deadline and self.proc.poll() is None, "the browser was not started"
            time.sleep(0.05)
        return self.argv_file.read_text().splitlines()


def page_path(argv: list[str]) -> str:
    assert len(argv) == 1 and argv[0].startswith("file:///"), argv
    return urllib.parse.unquote(urllib.parse.urlsplit(argv[0]).path)


def redirect_targets(page: str) -> list[str]:
    """Where the page sends the browser: its script, its meta refresh, its link."""
    script = json.loads(re.search(r"location\.replace\((\".*?\")\);", page).group(1))
    refresh = html.unescape(re.search(r'http-equiv="refresh" content="0; url=([^"]*)"', page).group(1))
    link = html.unescape(re.search(r'<a href="([^"]*)"', page).group(1))
    return [script, refresh, link]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_browser_gets_a_private_file_not_the_token(tmp_path, sig):
    v = ViewerWithBrowser(tmp_path)
    try:
        argv = v.browser_argv()
        assert v.token and len(v.token) >= 32
        assert not any(v.token in a for a in argv), argv
        path = page_path(argv)
        assert os.path.dirname(os.path.dirname(path)) == str(v.tmpdir)
        st, dst = os.lstat(path), os.lstat(os.path.dirname(path))
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
        assert stat.S_ISDIR(dst.st_mode) and stat.S_IMODE(dst.st_mode) == 0o700, oct(dst.st_mode)
        assert st.st_uid == dst.st_uid == os.geteuid()
        with open(path, encoding="utf-8") as f:
            assert redirect_targets(f.read()) == [v.url] * 3
    finally:
        rc, err = v.stop(sig)
    assert rc == 0 and "stopped" in err and "Traceback" not in err, (rc, err)
    assert os.listdir(v.tmpdir) == []  # the file and its directory are gone


def test_no_browser_writes_no_file(tmp_path):
    v = ViewerWithBrowser(tmp_path, "--no-browser")
    time.sleep(0.5)  # a browser thread, were there one, has run by now
    assert os.listdir(v.tmpdir) == [] and not v.argv_file.exists()
    assert v.stop()[0] == 0


def test_page_opens_the_trace_in_chromium(tmp_path):
    """The file the browser is given, opened in headless Chromium, gets to the UI with the trace."""

    class LocalBrowser(Browser):
        def _event(self, msg):  # the start page is a file: let it load
            if msg.get("method") == "Fetch.requestPaused" and msg["params"]["request"]["url"].startswith("file://"):
                self._send("Fetch.continueRequest", requestId=msg["params"]["requestId"])
            else:
                super()._event(msg)

    wanted = _expected_tracks()
    v = ViewerWithBrowser(tmp_path)
    browser = LocalBrowser(tempfile.mkdtemp(dir=tmp_path))
    try:
        browser.call("Page.navigate", url=v.browser_argv()[0])
        txt = browser.wait_for_text(wanted)
        assert all(w in txt for w in wanted), txt[-2000:]
        here = browser.call("Runtime.evaluate", expression="location.href", returnByValue=True)["result"]["value"]
        assert here.startswith(v.url.split("#")[0]), here
    finally:
        browser.close()
        v.stop()
