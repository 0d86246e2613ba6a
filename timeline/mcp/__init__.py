"""`timeline mcp`: timeline's checks and queries as tools for agents, served
over stdio with the Model Context Protocol (the optional `mcp` package:
pip install 'timeline[mcp]').

    paths.py         the allowed directories, and listing the traces in them
    readonly_sql.py  what the sql tool accepts (queries only)
    server.py        the tools (descriptions, argument checks)
    worker.py        each call that reads a trace runs in a child process (time limits)
    jobs.py, queries.py  what those children compute

Nothing here is imported unless `timeline mcp` runs.
"""
