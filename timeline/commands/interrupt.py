"""Ctrl-C during `query`/`check`: stop the engine and exit 130 with one line.

Python runs signal handlers only between bytecodes of the main thread, and a
wasm query keeps the main thread in native code until it ends.  The C-level
handler still writes the signal number to the wakeup fd, so a watcher thread
sees it at once and interrupts the wasm engine (epoch interruption); the
native engine's HTTP wait is interrupted by the signal itself.

The Python-level handler must not raise KeyboardInterrupt while wasm code is
running: it would run inside one of the engine's host functions (a ctypes
callback), where the exception cannot unwind through the native frames (a
traceback, then memory corruption).  There it only interrupts the engine; the
call traps and raises KeyboardInterrupt once it is back in Python.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

import click

_WASM_MODULE = "timeline.trace_processor.wasm_engine"


def _wasm():
    """The wasm engine module if this process loaded it (never imported here:
    an import in a signal path, at exit, is trouble)."""
    return sys.modules.get(_WASM_MODULE)


def _watch(rfd: int) -> None:
    while True:
        try:
            data = os.read(rfd, 64)
        except OSError:
            return
        if not data:
            return
        if signal.SIGINT in data:
            wasm = _wasm()
            if wasm is not None:
                wasm.interrupt()


def _on_sigint(signum, frame) -> None:
    wasm = _wasm()
    if wasm is not None and wasm.in_call():
        wasm.interrupt()  # the running call traps and raises KeyboardInterrupt
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def interruptible():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    old = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
    old_handler = signal.signal(signal.SIGINT, _on_sigint)
    watcher = threading.Thread(target=_watch, args=(rfd,), daemon=True, name="sigint-watch")
    watcher.start()
    try:
        yield
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the way out
        click.echo("timeline: interrupted", err=True)
        raise SystemExit(130) from None
    finally:
        if signal.getsignal(signal.SIGINT) is _on_sigint:
            signal.signal(signal.SIGINT, old_handler)
        signal.set_wakeup_fd(old)
        os.close(wfd)  # the watcher reads EOF and ends
        watcher.join(timeout=1)
        os.close(rfd)
