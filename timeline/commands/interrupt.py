"""Ctrl-C during `query`/`check`: stop the engine and exit 130 with one line.

Python runs signal handlers only between bytecodes of the main thread, and a
wasm query keeps the main thread in native code until it ends.  The C-level
handler still writes the signal number to the wakeup fd, so a watcher thread
sees it at once and interrupts the wasm engine (epoch interruption); the
native engine's HTTP wait is interrupted by the signal itself.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading

import click


def _watch(rfd: int) -> None:
    while True:
        try:
            data = os.read(rfd, 64)
        except OSError:
            return
        if not data:
            return
        if signal.SIGINT in data:
            from ..trace_processor import wasm_engine

            wasm_engine.interrupt()


@contextlib.contextmanager
def interruptible():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    old = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
    watcher = threading.Thread(target=_watch, args=(rfd,), daemon=True, name="sigint-watch")
    watcher.start()
    try:
        yield
    except KeyboardInterrupt:
        click.echo("timeline: interrupted", err=True)
        raise SystemExit(130) from None
    finally:
        signal.set_wakeup_fd(old)
        os.close(wfd)  # the watcher reads EOF and ends
        watcher.join(timeout=1)
        os.close(rfd)
