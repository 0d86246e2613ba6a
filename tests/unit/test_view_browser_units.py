"""No private file and no browser when there is none to open. The browser handed a
private file: tests/system/test_view_browser.py.
"""
from __future__ import annotations

import signal
import tempfile
import time

from test_view_units import SAMPLE


def test_no_private_file_no_browser(tmp_path, monkeypatch):
    """Where the page cannot be written, no browser is started (the token
    never goes on a command line): a warning, and the viewer serves on."""
    import webbrowser

    from click.testing import CliRunner

    from timeline.commands.view import view
    from timeline.viewer import ViewerServer

    opened, served = [], []
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    monkeypatch.setattr(webbrowser, "open", lambda *a, **k: opened.append(a))

    def serve_once(self, poll_interval=0.5):
        served.append(self.url)
        raise KeyboardInterrupt

    monkeypatch.setattr(ViewerServer, "serve_forever", serve_once)
    res = CliRunner().invoke(view, [SAMPLE])  # click 8.2: stderr kept apart
    assert res.exit_code == 0 and served, (res.exit_code, res.stderr, res.exception)
    assert "warning: no browser opened" in res.stderr and "missing" in res.stderr, res.stderr
    time.sleep(0.2)  # a browser thread, were there one, has run by now
    assert opened == []
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # handlers put back
