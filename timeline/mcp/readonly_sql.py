"""Read-only PerfettoSQL for agents: what `timeline mcp`'s SQL tool accepts.

trace_processor holds the trace in memory, so most writes only change a
throwaway copy; but SQLite's ATTACH and VACUUM INTO create files on disk,
and a writing statement has no business in an investigation anyway.  So the
text is split into statements (comments, string literals and quoted names
skipped, never parsed further), and each must be a query: it starts with
SELECT, WITH or VALUES, or is `INCLUDE PERFETTO MODULE name` (the standard
library's read-only tables).  A statement that could write (INSERT, UPDATE,
DELETE, REPLACE INTO, CREATE, DROP, ALTER, ATTACH, DETACH, PRAGMA, VACUUM,
REINDEX, ANALYZE) is refused wherever the word appears outside quotes: a WITH
may lead to an INSERT.  Refusing a column that happens to be named `update`
is the price (quote it: "update").
"""
from __future__ import annotations

import re

QUERY_STARTS = {"select", "with", "values"}
WRITING_WORDS = {"insert", "update", "delete", "create", "drop", "alter", "attach", "detach", "pragma",
                 "vacuum", "reindex", "analyze"}
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_CLOSERS = {"'": "'", '"': '"', "`": "`", "[": "]"}
ALLOWED = "SELECT, WITH, VALUES, INCLUDE PERFETTO MODULE"


class WritingSql(ValueError):
    """The SQL is not a read-only query (the message says which statement and why)."""


def _tokens(sql: str):
    """(kind, word, position) of each token that matters: 'word' (lower
    case), 'quoted' (a string literal or quoted name: never a keyword) and
    ';'.  Comments and everything else are skipped."""
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            if j < 0:
                raise WritingSql("a /* comment is not closed")
            i = j + 2
        elif c in _CLOSERS:
            close, j = _CLOSERS[c], i + 1
            while True:  # a doubled quote inside is the quote itself
                j = sql.find(close, j)
                if j < 0:
                    raise WritingSql(f"a {c} quote is not closed")
                if close != "]" and sql.startswith(close * 2, j):
                    j += 2
                    continue
                break
            yield "quoted", None, i
            i = j + 1
        elif c == ";":
            yield ";", None, i
            i += 1
        elif c.isalpha() or c == "_":
            m = _WORD.match(sql, i)
            yield "word", m.group(0).lower(), i
            i = m.end()
        else:
            i += 1


def _statements(sql: str) -> list[list[str]]:
    """The tokens of each non-empty statement: its words, and '' for quoted text."""
    out: list[list[str]] = [[]]
    for kind, word, _ in _tokens(sql):
        if kind == ";":
            out.append([])
        else:
            out[-1].append(word or "")
    return [s for s in out if s]


def check_read_only(sql: str) -> int:
    """The number of statements in `sql` when every one is a read-only query,
    else WritingSql saying which is not."""
    statements = _statements(sql)
    if not statements:
        raise WritingSql("the SQL holds no statement")
    for k, words in enumerate(statements, 1):
        where = f"statement {k}" if len(statements) > 1 else "the statement"
        bad = next((w for w in words if w in WRITING_WORDS), None)
        if bad is None and any(pair == ("replace", "into") for pair in zip(words, words[1:])):
            bad = "replace into"
        if bad is not None:
            raise WritingSql(f"{where} uses {bad.upper()}: only read-only queries are allowed ({ALLOWED})")
        if words[0] in QUERY_STARTS or _is_include(words):
            continue
        raise WritingSql(f"{where} starts with {(words[0] or 'a quoted name').upper()}: only read-only queries "
                         f"are allowed ({ALLOWED})")
    return len(statements)


def _is_include(words: list[str]) -> bool:
    """INCLUDE PERFETTO MODULE a.b.c (the dots are not tokens: the name is words only)."""
    return words[:3] == ["include", "perfetto", "module"] and len(words) > 3 and "" not in words[3:]


def with_row_limit(sql: str, rows: int) -> str:
    """`sql` (already check_read_only) with its last statement, when it is a
    query, wrapped to return at most `rows` rows: the engine then never builds
    a larger result than the caller will see."""
    toks = list(_tokens(sql))
    starts = [0] + [pos + 1 for kind, _, pos in toks if kind == ";"]
    last = next(s for s in reversed(starts) if any(k != ";" and p >= s for k, _, p in toks))
    first_word = next(w for k, w, p in toks if p >= last and k != ";")
    if first_word not in QUERY_STARTS:
        return sql
    body = sql[last:].rstrip().rstrip(";")
    # the newline: a -- comment at the end of the body must not swallow the ')'
    return f"{sql[:last]}\nselect * from (\n{body}\n) limit {int(rows)}"
