"""The pieces of `timeline mcp` without a client: what the SQL tool accepts,
the row limit, the allowed directories and links, listing traces, the worker
process, and that the core never imports the MCP SDK.  Through a real MCP
client: tests/system/test_mcp.py."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from helpers import REPO
from timeline.errors import UserError
from timeline.mcp.paths import AllowedDirs, PathRefused, find_traces
from timeline.mcp.readonly_sql import WritingSql, check_read_only, with_row_limit
from timeline.mcp import worker as workers_mod
from timeline.mcp.worker import WorkerError, Workers

SAMPLE = os.path.join(REPO, "sample_traces", "train_cpu.pftrace")


@pytest.mark.parametrize("sql,statements", [
    ("select 1", 1),
    ("SELECT name FROM slice; select 2;", 2),
    ("with x as (select 1 as a) select a from x", 1),
    ("values (1), (2)", 1),
    ("include perfetto module linux.cpu.utilization.process; select 1 -- done", 2),
    ("select replace(name, 'a', 'b') from slice", 1),                 # replace() the function
    ("select 'drop table slice; insert' as text", 1),                 # words inside a literal
    ('select "update", [delete] from t', 1),                          # quoted names
    ("select * from pragma_table_info('slice')", 1),                  # the read-only pragma function
    ("/* create */ select 1 -- attach\n", 1),
])
def test_read_only_queries_pass(sql, statements):
    assert check_read_only(sql) == statements


@pytest.mark.parametrize("sql,why", [
    ("create table t(x)", "CREATE"),
    ("CREATE PERFETTO TABLE t AS SELECT 1", "CREATE"),
    ("insert into slice(name) values ('x')", "INSERT"),
    ("with x as (select 1) insert into t select * from x", "INSERT"),
    ("with x as (select 1) replace into t select * from x", "REPLACE INTO"),
    ("with x as (select 1) delete from t", "DELETE"),
    ("update slice set name = 'x'", "UPDATE"),
    ("select 1; drop table slice", "DROP"),
    ("attach database '/tmp/x.db' as x", "ATTACH"),
    ("vacuum into '/tmp/copy.db'", "VACUUM"),
    ("pragma writable_schema = 1", "PRAGMA"),
    ("alter table slice rename to s", "ALTER"),
    ("explain select 1", "starts with EXPLAIN"),
    ("begin", "starts with BEGIN"),
    ("select 1 /* never closed", "not closed"),
    ("select 'never closed", "not closed"),
    (" ; -- only a comment", "no statement"),
])
def test_writing_sql_is_refused(sql, why):
    with pytest.raises(WritingSql, match=why):
        check_read_only(sql)


def test_row_limit_is_applied_in_the_sql():
    db = sqlite3.connect(":memory:")
    endless_if_unlimited = ("with recursive c(x) as (select 1 union all select x + 1 from c where x < 1000000) "
                            "select x from c order by x desc -- the biggest first")
    rows = db.execute(with_row_limit(endless_if_unlimited, 3)).fetchall()
    assert rows == [(1000000,), (999999,), (999998,)]
    assert db.execute(with_row_limit("values (1), (2);", 10)).fetchall() == [(1,), (2,)]
    # only the last statement is wrapped; one that returns no rows is left alone
    two = with_row_limit("select 1; select 2 from (values (1), (2), (3))", 2)
    assert two.startswith("select 1;") and two.rstrip().endswith("limit 2")
    include = "include perfetto module slices.with_context"
    assert with_row_limit(include, 5) == include


@pytest.fixture
def dirs(tmp_path):
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    (allowed / "sub").mkdir(parents=True)
    outside.mkdir()
    for p in (allowed / "a.pftrace", allowed / "sub" / "b.json", outside / "secret.pftrace"):
        with open(SAMPLE, "rb") as src, open(p, "wb") as dst:
            dst.write(src.read(4096) if p.suffix == ".pftrace" else b'{"traceEvents": []}')
    os.symlink(outside / "secret.pftrace", allowed / "out.pftrace")
    os.symlink(outside, allowed / "outdir")
    os.symlink(allowed / "a.pftrace", allowed / "in.pftrace")
    return allowed, outside


def test_paths_are_resolved_and_kept_inside(dirs):
    allowed, outside = dirs
    a = AllowedDirs([str(allowed)])
    assert a.resolve(str(allowed / "a.pftrace")) == str(allowed / "a.pftrace")
    assert a.resolve("sub/b.json") == str(allowed / "sub" / "b.json")        # relative: from the first one
    assert a.resolve("in.pftrace") == str(allowed / "a.pftrace")             # a link inside: its target
    for bad in (str(outside / "secret.pftrace"), "../outside/secret.pftrace", "/etc/passwd", "/"):
        with pytest.raises(PathRefused, match="outside the allowed directories"):
            a.resolve(bad)
    for link in ("out.pftrace", "outdir/secret.pftrace", str(allowed / "out.pftrace")):
        with pytest.raises(PathRefused, match="symbolic link"):
            a.resolve(link)
    for nothing in ("", "a\0b"):
        with pytest.raises(PathRefused):
            a.resolve(nothing)
    assert AllowedDirs([str(allowed), str(outside)]).resolve("out.pftrace") == str(outside / "secret.pftrace")
    with pytest.raises(UserError, match="not a directory"):
        AllowedDirs([str(allowed / "a.pftrace")])


def test_listing_skips_links_and_tells_kinds(dirs):
    allowed, _ = dirs
    a = AllowedDirs([str(allowed)])
    got = find_traces(a)
    assert {os.path.relpath(t["path"], allowed): t["kind"] for t in got["traces"]} == \
        {"a.pftrace": "perfetto", os.path.join("sub", "b.json"): "chrome json"}
    assert got["count"] == 2 and got["truncated"] is False
    assert [t["path"] for t in find_traces(a, "sub")["traces"]] == [str(allowed / "sub" / "b.json")]
    with pytest.raises(PathRefused):
        find_traces(a, "outdir")


@pytest.fixture
def workers():
    w = Workers("auto", None)
    yield w
    w.close()


def test_worker_answers_and_reports_errors_in_one_line(workers):
    res = workers.run("sql", SAMPLE, "given.pftrace", {"query": "select count(*) as n from sched", "max_rows": 5},
                      limit_s=60)
    assert res["columns"] == ["n"] and res["rows"][0][0] > 1000 and res["trace"] == "given.pftrace"
    with pytest.raises(WorkerError, match="does not exist"):
        workers.run("summary", SAMPLE + ".missing", "x", {})
    with pytest.raises(WorkerError, match="no such table: nope") as e:
        workers.run("sql", SAMPLE, "x", {"query": "select * from nope", "max_rows": 5}, limit_s=60)
    assert "\n" not in str(e.value)
    with pytest.raises(WorkerError, match="read-only"):  # the worker checks again where it runs
        workers.run("sql", SAMPLE, "x", {"query": "attach database '/tmp/x.db' as x", "max_rows": 5})


def _pid(workers, path):
    return workers._by_path[path].proc.pid


def test_a_trace_stays_loaded_until_it_changes_or_times_out(workers, tmp_path, monkeypatch):
    trace = tmp_path / "t.pftrace"
    trace.write_bytes(open(SAMPLE, "rb").read())
    path, q = str(trace), {"query": "select count(*) from thread", "max_rows": 5}
    first = workers.run("sql", path, "t", q)
    pid = _pid(workers, path)
    assert workers.run("sql", path, "t", q) == first and _pid(workers, path) == pid  # the same process
    os.utime(path, ns=(1, 1))  # the file changed: loaded again
    assert workers.run("sql", path, "t", q) == first and _pid(workers, path) != pid
    pid = _pid(workers, path)
    endless = ("with recursive c(x) as (select 1 union all select x + 1 from c where x < 1000000000000) "
               "select count(*) from c")
    with pytest.raises(WorkerError, match="time limit of 0.5 s"):
        workers.run("sql", path, "t", {"query": endless, "max_rows": 5}, limit_s=0.5)
    assert path not in workers._by_path  # that process ended ...
    assert workers.run("sql", path, "t", q) == first and _pid(workers, path) != pid  # ... and the next loads anew
    # at most MAX_LOADED traces stay loaded: the least recently used goes
    monkeypatch.setattr(workers_mod, "MAX_LOADED", 1)
    workers.run("sql", SAMPLE, "s", q)
    assert list(workers._by_path) == [SAMPLE]


def _run(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_core_never_imports_the_sdk():
    r = _run("import sys, timeline.cli\n"
             "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'timeline.mcp'))))",
             PYTHONPATH=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_without_the_sdk_the_command_says_how_to_install(tmp_path):
    fake = tmp_path / "mcp"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('no mcp here')\n")
    r = subprocess.run([sys.executable, "-m", "timeline.cli", "mcp"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}, stdin=subprocess.DEVNULL)
    assert r.returncode == 2, r
    assert r.stderr.strip().splitlines() == ["timeline: error: timeline mcp needs the MCP SDK: "
                                             "pip install 'timeline[mcp]' (or: pip install mcp)"]
    # an SDK without MCPServer (mcp 1.x called it FastMCP): the line says which version is needed
    (fake / "__init__.py").write_text("")
    r = subprocess.run([sys.executable, "-m", "timeline.cli", "mcp"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r
    assert "timeline mcp needs mcp >= 2" in r.stderr and "pip install -U 'timeline[mcp]'" in r.stderr


def _tools_and_diff_call(tmp_path, monkeypatch):
    """(the tool names, what diff_traces handed the worker) of a server built
    in-process, talked to by the SDK's in-memory client."""
    import anyio
    from mcp.client import Client

    from timeline.mcp import server as srv

    sent = []

    class StandIn:
        def __init__(self, engine, tp_bin):
            pass

        def run_alone(self, *a):
            sent.append(a)
            return {"diff": "stand-in"}

    monkeypatch.setattr(srv, "Workers", StandIn)
    (tmp_path / "a.pftrace").write_bytes(b"")
    (tmp_path / "b.pftrace").write_bytes(b"")
    server = srv.build_server(AllowedDirs([str(tmp_path)]))

    async def go():
        async with Client(server) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            if "diff_traces" in names:
                await client.call_tool("diff_traces", {"baseline": "a.pftrace", "candidate": "b.pftrace"})
            return names

    return anyio.run(go), sent


def test_diff_tool_appears_with_timeline_diff(tmp_path, monkeypatch):
    pytest.importorskip("mcp")
    monkeypatch.setitem(sys.modules, "timeline.diff", None)  # not importable
    names, _ = _tools_and_diff_call(tmp_path, monkeypatch)
    assert "diff_traces" not in names and "run_checks" in names
    import types

    monkeypatch.setitem(sys.modules, "timeline.diff", types.SimpleNamespace(compare=lambda b, c, **o: None))
    names, sent = _tools_and_diff_call(tmp_path, monkeypatch)
    assert "diff_traces" in names
    (job, name, args), = sent
    assert (job, name) == ("diff", "a.pftrace")
    assert args == {"baseline": str(tmp_path / "a.pftrace"), "baseline_name": "a.pftrace",
                    "candidate": str(tmp_path / "b.pftrace"), "candidate_name": "b.pftrace", "options": None}


def test_diff_job_returns_the_reports_json(monkeypatch):
    import types

    from timeline.mcp import jobs

    calls = []

    class Report:
        def to_json(self):
            return {"rows": [{"what": "step time", "change": 0.25}]}

    monkeypatch.setitem(sys.modules, "timeline.diff", types.SimpleNamespace(
        compare=lambda b, c, **options: calls.append((b, c, options)) or Report()))
    got = jobs.diff("/t/base.pftrace", "base.pftrace", "/t/cand.pftrace", "cand.pftrace", {"min_change": 0.1},
                    tp_config="the server's engine")
    assert calls == [("/t/base.pftrace", "/t/cand.pftrace", {"min_change": 0.1, "tp_config": "the server's engine"})]
    assert got == {"baseline": "base.pftrace", "candidate": "cand.pftrace",
                   "diff": {"rows": [{"what": "step time", "change": 0.25}]}}
    # what the server decides is not the agent's to set, and numbers are numbers
    for bad, why in (({"tp_config": None}, "unknown diff option 'tp_config'"), ({"user": 0}, "unknown diff option"),
                     ({"checks": "yes"}, "wrong type"), ({"min_change": True}, "wrong type")):
        with pytest.raises(ValueError, match=why):
            jobs.diff("/t/a", "a", "/t/b", "b", bad)


def test_checks_on_a_trace_kept_loaded_do_not_change(workers):
    """The calls share one loaded trace: the tables other calls made (and an
    INCLUDEd module) leave the checks' findings as they were."""
    first = workers.run("checks", SAMPLE, "s", {})
    for job, args in (("summary", {}), ("describe", {"start_s": 1, "end_s": 2}), ("top", {"what": "cuda"}),
                      ("sql", {"query": "include perfetto module slices.with_context; "
                                        "select count(*) from thread_slice", "max_rows": 5})):
        workers.run(job, SAMPLE, "s", args)
    again = workers.run("checks", SAMPLE, "s", {})
    for doc in (first, again):
        for c in doc["checks"]:
            c.pop("seconds")
    assert again == first and any(c["status"] == "ok" for c in first["checks"])
