"""For checks whose SQL is in map-reduce form (a `-- @reduce TABLE` line, checks/traceset.py): their
partial is the map table's rows, worked out at conversion over the whole recording, and the merge is
the check's own reduce SQL run on them in SQLite, so the SQL formats the numbers as on one trace."""
from __future__ import annotations

import sqlite3


def reduced(check_id: str, params: dict, columns: list, rows: list):
    """The check's rows: its reduce SQL, rendered with `params`, on the map table's `rows`; None where
    SQLite refuses them (an index not as written: the check runs through trace_processor)."""
    from ..catalog import BY_ID
    from ..runner import render_sql
    from ..traceset import reduce_rows, split_sql

    _, table, sql = split_sql(render_sql(BY_ID[check_id], params))
    try:
        return reduce_rows(sql, table, columns, [tuple(r) for r in rows])
    except sqlite3.Error:
        return None
