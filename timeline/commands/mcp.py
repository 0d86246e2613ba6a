"""`timeline mcp`: serve the checks and queries as MCP tools over stdio."""
from __future__ import annotations

import click

from ..errors import UserError
from .query import engine_options

INSTALL_HINT = "timeline mcp needs the MCP SDK: pip install 'timeline[mcp]' (or: pip install mcp)"


def _missing() -> str:
    """The one line for an SDK that is absent, or older than 2 (FastMCP, since renamed MCPServer)."""
    import importlib
    from importlib import metadata

    try:
        importlib.import_module("mcp")
        version = metadata.version("mcp")
    except (ImportError, metadata.PackageNotFoundError):
        return INSTALL_HINT
    return f"timeline mcp needs mcp >= 2 (this is mcp {version}): pip install -U 'timeline[mcp]'"


@click.command("mcp")
@click.option("--allow", "allow", multiple=True, type=click.Path(file_okay=False), metavar="DIR",
              help="A directory whose traces the tools may read (repeatable; default: the current directory). "
                   "Paths outside them, or links leading out, are refused.")
@engine_options
def mcp_cmd(allow, tp_config):
    """Serve timeline's checks and queries to an agent as MCP tools, over
    stdin/stdout: list traces, summarize one, run the checks, describe a
    thread or rank, top CUDA calls / kernels / Python functions, read-only
    SQL (30 s and 1000 rows by default), and diff two traces. Nothing is
    written. An MCP client starts it, e.g. {"command": "timeline", "args":
    ["mcp", "--allow", "/data/traces"]}.
    """
    import importlib

    try:
        importlib.import_module("mcp.server.mcpserver")
    except ImportError:
        raise UserError(_missing()) from None
    from ..mcp.paths import AllowedDirs
    from ..mcp.server import build_server

    allowed = AllowedDirs(allow or ["."])
    server = build_server(allowed, engine=tp_config.engine, tp_bin=tp_config.bin_path)
    try:
        server.run("stdio")
    except KeyboardInterrupt:
        pass
    finally:
        server.timeline_workers.close()
