"""Checks over a trace set (a recording split in time: a directory with
index.json and one complete trace per chunk), map-reduce style.

Each chunk is checked in a worker of fleet.py's pool, with its own engine
(memory bounded by the chunk, and by an address-space limit per worker). A
check whose SQL has a `-- @reduce TABLE` line is mergeable: above the line
runs on each chunk and leaves TABLE, rows that add up across chunks (counts,
sums, min/max, per-key lists); below it runs once, in SQLite, on all chunks'
rows, and gives the findings a whole-trace run gives (there the same SQL runs
in one piece). Any other check runs whole on every chunk and its findings are
listed per chunk, each saying which chunk, with a note that the check is not
merged yet.

index.json: {"format": "timeline-trace-set", "version": 1, "chunks": [{"file",
"start_ns", "end_ns", "bytes", "events", "families", "machine", "rank"}, ...],
"data": {check data name: held?}, "partials": {...}}. Before any chunk is loaded, a check
none of whose data the set holds is "not recorded", and a check with a partial comes
from the index (timeline.checks.partials).
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
from typing import Optional

from ..errors import UserError
from ..terminal import printable

INDEX = "index.json"
DATA = "data"  # the index's key: which of the checks' data the set holds (converters/trace_set.data_seen)
FORMAT, VERSION = "timeline-trace-set", 1
MAX_INDEX_BYTES = 16 << 20
REDUCE_RE = re.compile(r"^--\s*@reduce\s+([A-Za-z_][A-Za-z0-9_]*)\s*$", re.M)
_PERFETTO_TABLE = re.compile(r"create\s+or\s+replace\s+perfetto\s+table\s+", re.I)


def is_trace_set(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, INDEX))


def read_index(path: str, user=None) -> list[dict]:
    """The chunks of the set at `path`, in time order, each with "path" added;
    a UserError (one line) when the index is not one."""
    return read_index_doc(path, user)[1]


def read_index_doc(path: str, user=None) -> tuple[dict, list[dict]]:
    """(the index document, its chunks as read_index gives them)."""
    where = printable(os.path.join(path, INDEX))
    try:
        if user is None:
            from ..identity import invoking_user

            user = invoking_user()
        raw = user.read_file(os.path.join(path, INDEX), limit=MAX_INDEX_BYTES)
        doc = json.loads(raw)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read the trace set index {where}: {getattr(e, 'strerror', None) or e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise UserError(f"{where} is not a {FORMAT} version {VERSION} index")
    chunks = doc.get("chunks")
    if not isinstance(chunks, list) or not chunks:
        raise UserError(f"{where} lists no chunks")
    out = []
    for i, c in enumerate(chunks):
        name = c.get("file") if isinstance(c, dict) else None
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            raise UserError(f"{where}: chunk {i + 1} has no plain file name")
        if not all(isinstance(c.get(k), int) for k in ("start_ns", "end_ns")):
            raise UserError(f"{where}: chunk {i + 1} lacks start_ns / end_ns")
        out.append({**c, "path": os.path.join(path, name)})
    return doc, sorted(out, key=lambda c: c["start_ns"])


# -- the SQL, split -------------------------------------------------------------

def split_sql(sql: str) -> Optional[tuple[str, str, str]]:
    """(map SQL, partial table, reduce SQL) of a check in map-reduce form, else None."""
    m = REDUCE_RE.search(sql)
    if not m:
        return None
    return sql[:m.start()], m.group(1), sql[m.end():]


def _statements(sql: str) -> list[str]:
    """The SQL's statements (split where SQLite says one is complete: a ';'
    inside a string or a comment does not end one)."""
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip() and not all(ln.lstrip().startswith("--") or not ln.strip() for ln in buf.splitlines()):
        out.append(buf.strip())
    return [s.rstrip(";") for s in out]


def reduce_rows(reduce_sql: str, table: str, columns: list[str], rows: list[tuple]) -> list[dict]:
    """The reduce SQL run in SQLite on `rows` (every chunk's partial table)."""
    db = sqlite3.connect(":memory:")
    try:
        cols = ", ".join(f'"{c}"' for c in columns)
        db.execute(f"create table {table} ({cols})")
        db.executemany(f"insert into {table} values ({', '.join('?' * len(columns))})", rows)
        stmts = [_PERFETTO_TABLE.sub("create table ", s) for s in _statements(reduce_sql)]
        for s in stmts[:-1]:
            db.execute(s)
        cur = db.execute(stmts[-1])
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        db.close()


# -- one chunk (in a worker) -------------------------------------------------------

def check_chunk(job) -> dict:
    """Worker: a chunk's families, bounds, mergeable checks' partial rows and
    the other checks' JSON results (or {"error"})."""
    chunk, index, tp_config, ids, params = job
    from ..trace_processor import TraceProcessorError
    from .report import to_json
    from .runner import Report, detect_families, prelude_sql, render_sql, run_check, select_checks

    _limit_memory()
    try:
        tp = tp_config.load(chunk["path"])
    except Exception as e:  # noqa: BLE001 - reported in the chunk's row
        return {"chunk": index, "error": f"cannot load: {str(e).splitlines()[0] if str(e) else type(e).__name__}"}
    try:
        families = detect_families(tp)
        prelude = prelude_sql([c for c in select_checks(ids) if any(families.get(f) for f in c.families)])
        if prelude:
            tp.query(prelude)
        start, end = (tp.query("select start_ts, end_ts from trace_bounds").rows or [(None, None)])[0]
        partials, whole = {}, []
        for check in select_checks(ids):
            p = {**check.defaults(), **(params or {}).get(check.id, {})}
            parts = split_sql(render_sql(check, p))
            if parts is None or not any(families.get(f) for f in check.families):
                whole.append(run_check(tp, check, families, p))
                continue
            map_sql, table, _ = parts
            try:
                tp.query(map_sql)
                res = tp.query(f"select * from {table}")
                partials[check.id] = {"columns": res.columns, "rows": [list(r) for r in res.rows]}
            except TraceProcessorError as e:
                partials[check.id] = {"error": str(e).splitlines()[0]}
        rep = to_json(Report(chunk["path"], tp.engine_name, start, end, families, whole))
        return {"chunk": index, "families": families, "start": start, "end": end, "engine": tp.engine_name,
                "partials": partials, "checks": rep["checks"]}
    except TraceProcessorError as e:
        return {"chunk": index, "error": f"checks failed: {str(e).splitlines()[0]}"}
    finally:
        tp.close()


def _limit_memory() -> None:
    """Bounds a worker's memory. The wasm engine bounds itself (wasm32: 4 GiB
    at most; chunks are sized to fit it) and reserves guard space far past
    what it uses, so an address-space limit cannot apply to it; the native
    engine is a child process, which inherits the limit set here from
    TIMELINE_WORKER_MEMORY (bytes)."""
    cap = os.environ.get("TIMELINE_WORKER_MEMORY")
    if not cap:
        return
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_AS, (int(cap), int(cap)))
    except (ValueError, OSError):
        pass


# -- merging ----------------------------------------------------------------------

NOT_MERGED = "not merged across chunks yet: its findings are per chunk"


def check_set(path: str, tp_config, user, ids=None, params=None, workers: Optional[int] = None, executor=None):
    """The checks on every chunk of the set at `path`, merged into one
    runner.Report; the chunks run on `executor` (executors.Executor: the
    local pool by default, or a Ray cluster)."""
    from .executors import LOCAL, run_jobs
    from .runner import select_checks

    doc, chunks = read_index_doc(path, user)
    wanted = [c.id for c in select_checks(ids)]
    ready = absent_by_index(doc, wanted, params)
    ready.update(from_partials(doc, chunks, [cid for cid in wanted if cid not in ready], params))
    rest = [cid for cid in wanted if cid not in ready]
    outs = []
    if rest:
        jobs = [(c, i, tp_config, rest, params) for i, c in enumerate(chunks)]
        outs = run_jobs(check_chunk, jobs, workers, executor or LOCAL)
    report = merge(path, chunks, outs, rest, params, data=doc.get(DATA))
    order = {cid: i for i, cid in enumerate(wanted)}
    report.results = sorted(report.results + list(ready.values()), key=lambda r: order[r.check.id])
    return report


def absent_by_index(doc: dict, wanted: list[str], params=None) -> dict:
    """check id -> its "not recorded" result, for each wanted check none of whose data the set holds
    by its index's "data" (the converter's CheckData.seen: what the SQL would find on every chunk).
    As in the runner, this comes before anything else; a check with data the index cannot tell
    about (scheduling, drops) or from a set written before "data" is not among them."""
    from .catalog import BY_ID
    from .runner import not_recorded

    data = doc.get(DATA)
    if not isinstance(data, dict):
        return {}
    out = {}
    for cid in wanted:
        check = BY_ID[cid]
        if all(data.get(f) is False for f in check.families):
            out[cid] = not_recorded(check, {**check.defaults(), **(params or {}).get(cid, {})})
    return out


def from_partials(doc: dict, chunks: list[dict], wanted: list[str], params=None) -> dict:
    """check id -> its CheckResult from the partials the converter wrote into the index
    (timeline.checks.partials), for each wanted check that has one that applies; the others
    run through trace_processor (a set written before partials, other parameters)."""
    from . import partials
    from .catalog import BY_ID
    from .runner import CheckResult, _status, _to_finding, by_severity

    stored = doc.get(partials.PARTIALS)
    out = {}
    if not isinstance(stored, dict):
        return out
    for cid in wanted:
        mod = partials.module(cid)
        if mod is None or cid not in stored:
            continue
        check = BY_ID[cid]
        p = {**check.defaults(), **(params or {}).get(cid, {})}
        per_chunk = [(c.get(partials.PARTIALS) or {}).get(cid) if isinstance(c.get(partials.PARTIALS), dict)
                     else None for c in chunks]
        try:
            rows = mod.merge(stored[cid], per_chunk, p)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            rows = None  # an index not as written: the SQL decides
        if rows is None:
            continue
        found = by_severity([_to_finding(r) for r in rows])
        out[cid] = CheckResult(check, _status(found), found, p, note=FROM_INDEX)
    return out


FROM_INDEX = "from the partial the converter wrote into the set's index (no trace_processor)"


def _span(chunk: dict, t0: int) -> str:
    return f"{(chunk['start_ns'] - t0) / 1e9:+.1f}..{(chunk['end_ns'] - t0) / 1e9:+.1f} s"


def _chunk_list(idx: list[int], total: int) -> str:
    """'every chunk', or 'chunks 1-3, 5 of 7' (0-based idx in, 1-based out)."""
    if len(idx) == total:
        return f"every chunk ({total})"
    runs: list[list[int]] = []
    for i in idx:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    parts = [f"{a + 1}" if a == b else f"{a + 1}-{b + 1}" for a, b in runs]
    return f"chunks {', '.join(parts)} of {total}"


def merge(path: str, chunks: list[dict], outs: list[dict], ids=None, params=None, data=None):
    from .runner import CheckResult, Finding, Report, _status, _to_finding, by_severity, select_checks

    good = [o for o in outs if "error" not in o]
    bad = [o for o in outs if "error" in o]
    families: dict[str, bool] = {}
    for o in good:
        for k, v in o["families"].items():
            families[k] = families.get(k, False) or v
    starts = [o["start"] for o in good if o["start"] is not None]
    ends = [o["end"] for o in good if o["end"] is not None]
    t0 = chunks[0]["start_ns"] if chunks else 0  # offsets from the set's start
    results = []
    for check in (select_checks(ids) if ids is None or ids else []):
        p = {**check.defaults(), **(params or {}).get(check.id, {})}
        parts = [o["partials"][check.id] for o in good if check.id in o.get("partials", {})]
        if parts:
            failed = next((x["error"] for x in parts if "error" in x), None)
            if failed:
                results.append(CheckResult(check, "failed", [], p, error=failed))
                continue
            from .runner import render_sql

            _, table, reduce_sql = split_sql(render_sql(check, p))
            rows = [tuple(r) for x in parts for r in x["rows"]]
            try:
                found = [_to_finding(r) for r in reduce_rows(reduce_sql, table, parts[0]["columns"], rows)]
            except sqlite3.Error as e:
                results.append(CheckResult(check, "failed", [], p, error=f"merging the chunks: {e}"))
                continue
            found = by_severity(found)
            results.append(CheckResult(check, _status(found), found, p))
            continue
        per = [(o, next(c for c in o["checks"] if c["id"] == check.id)) for o in good]
        recorded = [(o, c) for o, c in per if c["status"] != "not recorded"]
        if not recorded:
            note = per[0][1]["note"] if per else "no chunk could be checked"
            results.append(CheckResult(check, "not recorded", [], p, note=note))
            continue
        found, errors = [], []
        same: dict[tuple, list] = {}  # one finding said alike by several chunks (an n/a reason) is listed once
        for o, c in recorded:
            where = f"chunk {o['chunk'] + 1}/{len(chunks)} ({_span(chunks[o['chunk']], t0)})"
            if c["status"] == "failed":
                errors.append(f"{where}: {c['error']}")
            for f in c["findings"]:
                same.setdefault((f["severity"], f["finding"], f["hint"]), []).append((o["chunk"], where, f))
        for (sev, text, hint), seen in same.items():
            _, where, f = seen[0]
            if len(seen) > 1:
                where = _chunk_list(sorted(i for i, _, _ in seen), len(chunks))
            found.append(Finding(sev, f"{where}: {text}", f["ts"], f["dur"], hint, f["evidence"]))
        found = by_severity(found)
        status = "failed" if errors and not found else _status(found)
        results.append(CheckResult(check, status, found, p, error="; ".join(errors) or None, note=NOT_MERGED))
    incomplete = None
    if bad:
        incomplete = "; ".join(f"chunk {o['chunk'] + 1} ({printable(chunks[o['chunk']]['file'])}): {o['error']}"
                               for o in bad)
    engine = good[0]["engine"] if good else "?"
    if not outs and chunks:  # every check came from the index: no chunk was opened
        engine = None
        starts, ends = [chunks[0]["start_ns"]], [max(c["end_ns"] for c in chunks)]
        if isinstance(data, dict):  # the checks' data, as a trace's report names them
            families = {"sched": any((c.get("switches") or 0) > 0 for c in chunks)}
            families.update({k: v for k, v in data.items() if isinstance(v, bool)})
        else:
            families = {f: True for c in chunks for f in (c.get("families") or []) if isinstance(f, str)}
    return Report(path, engine, min(starts) if starts else None, max(ends) if ends else None, families,
                  results, incomplete)
