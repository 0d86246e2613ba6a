"""`timeline mcp` through a real MCP client (the SDK's stdio client and
ClientSession) that starts the command as a process: the tools it lists, the
checks' findings against `timeline check --format json` on a recording made
here, the allowed directories (a path outside, a link leading out), the SQL
tool's refusals and limits.  The pieces alone: tests/unit/test_mcp_units.py."""
from __future__ import annotations

import json
import os
import sys
import textwrap
import time

import pytest

from helpers import REPO, require_root, timeline_cmd

if not os.environ.get("CI"):  # CI installs the extra (scripts/setup.sh): a missing SDK fails there
    pytest.importorskip("mcp", reason="timeline[mcp] is not installed")
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

SAMPLE_GPU = os.path.join(REPO, "sample_traces", "train_gpu.pftrace")

# The main thread spins on CPU 0 while two child processes spin there too:
# cpu_contention has something to say, most other checks say ok or n/a; its
# Python samples (pystack) are in spin().
CONTENDED = textwrap.dedent("""
    import os, time
    os.sched_setaffinity(0, {0})
    def spin(s):
        end = time.perf_counter() + s
        while time.perf_counter() < end: pass
    kids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            spin(0.6); os._exit(0)
        kids.append(pid)
    spin(0.4)
    for k in kids: os.waitpid(k, 0)
""")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """An allowed directory with a fresh recording and the GPU sample, a
    trace outside it, and a link inside that leads to the outside one."""
    require_root()
    base = tmp_path_factory.mktemp("mcp")
    allowed, outside = base / "allowed", base / "outside"
    allowed.mkdir()
    outside.mkdir()
    rec = str(allowed / "contended.pftrace")
    r = timeline_cmd("record", "-q", "-e", "sched,pystack", "--py-sample-hz", "499", "-o", rec, "--",
                     sys.executable, "-c", CONTENDED, timeout=180)
    assert r.returncode == 0, r.stderr
    ranks = str(allowed / "ranks.pftrace")  # two ranked processes (RANK in their environment)
    r = timeline_cmd("record", "-q", "-e", "sched", "-o", ranks, "--", "sh", "-c",
                     "RANK=0 WORLD_SIZE=2 sleep 0.3 & RANK=1 WORLD_SIZE=2 sleep 0.3; wait", timeout=180)
    assert r.returncode == 0, r.stderr
    with open(SAMPLE_GPU, "rb") as src, open(allowed / "gpu.pftrace", "wb") as dst:
        dst.write(src.read())
    with open(SAMPLE_GPU, "rb") as src, open(outside / "secret.pftrace", "wb") as dst:
        dst.write(src.read())
    os.symlink(outside / "secret.pftrace", allowed / "link_out.pftrace")
    return {"allowed": str(allowed), "outside": str(outside), "recorded": rec, "ranks": ranks,
            "gpu": str(allowed / "gpu.pftrace"), "secret": str(outside / "secret.pftrace"),
            "link_out": str(allowed / "link_out.pftrace"), "errlog": str(base / "server-stderr.log")}


def with_session(traces, work):
    """Runs `work(session)` (a coroutine function) against `timeline mcp
    --allow <the allowed directory>` started by the SDK's stdio client."""
    import anyio

    params = StdioServerParameters(command=sys.executable, args=["-m", "timeline.cli", "mcp", "--allow", traces["allowed"]],
                                   env={"PYTHONPATH": REPO}, cwd=traces["allowed"])

    async def go():
        with open(traces["errlog"], "a") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await work(session)

    return anyio.run(go)


def calls(traces, *requests):
    """Tool calls (name, arguments) in one session, in turn: per call
    (is_error, the structured result or the error's text)."""
    async def work(session):
        return [await session.call_tool(name, args, read_timeout_seconds=300) for name, args in requests]

    return [(True, r.content[0].text) if r.is_error else (False, r.structured_content)
            for r in with_session(traces, work)]


def test_lists_tools_with_descriptions(traces):
    async def work(session):
        return (await session.list_tools()).tools

    tools = {t.name: t for t in with_session(traces, work)}
    for name in ("list_traces", "trace_summary", "list_checks", "run_checks", "describe_thread", "top_calls", "sql"):
        assert name in tools, sorted(tools)
        assert len(tools[name].description) > 80, name  # says what it returns and when to use it
        assert tools[name].annotations.read_only_hint is True
    assert "query" in tools["sql"].input_schema["properties"]


def test_checks_are_the_same_findings_as_check_json(traces):
    path = traces["recorded"]
    (err, got), (err2, some), (err3, text) = calls(
        traces, ("run_checks", {"trace": path}),
        ("run_checks", {"trace": path, "only": ["cpu_contention", "dropped_events"],
                        "params": {"cpu_contention.warn_fraction": 0.01}}),
        ("run_checks", {"trace": path, "only": ["no_such_check"]}))
    assert not err, got
    r = timeline_cmd("check", path, "--format", "json")
    assert r.returncode == 0, r.stderr
    want = json.loads(r.stdout)
    for doc in (got, want):  # how long each check took differs from run to run
        for c in doc["checks"]:
            c.pop("seconds")
    assert got == want
    assert any(c["findings"] for c in got["checks"])  # the comparison compared something
    # some checks, a threshold changed: the same as --only/--param
    assert not err2, some
    r = timeline_cmd("check", path, "--format", "json", "--only", "cpu_contention,dropped_events",
                     "--param", "cpu_contention.warn_fraction=0.01")
    want = json.loads(r.stdout)
    assert [c["id"] for c in some["checks"]] == ["dropped_events", "cpu_contention"]
    assert [(c["status"], c["params"], c["findings"]) for c in some["checks"]] == \
        [(c["status"], c["params"], c["findings"]) for c in want["checks"]]
    assert err3 and "unknown check no_such_check" in text


def test_paths_outside_and_links_leading_out_are_refused(traces):
    refused = (traces["secret"], traces["link_out"], "link_out.pftrace",
               os.path.join(traces["allowed"], "..", "outside", "secret.pftrace"))
    *answers, (err, text), (lerr, listing) = calls(
        traces, *[("trace_summary", {"trace": p}) for p in refused],
        ("list_traces", {"directory": traces["outside"]}), ("list_traces", {}))
    for path, (perr, ptext) in zip(refused, answers):
        assert perr and "outside the allowed directories" in ptext, (path, ptext)
        assert "Traceback" not in ptext
    assert err and "outside the allowed directories" in text
    # listing the allowed directory shows its traces, not the link
    assert not lerr, listing
    names = {os.path.basename(t["path"]): t["kind"] for t in listing["traces"]}
    assert names == {"contended.pftrace": "perfetto", "gpu.pftrace": "perfetto", "ranks.pftrace": "perfetto"}


def test_summary_describe_and_top_agree_with_sql(traces):
    rec, gpu = traces["recorded"], traces["gpu"]
    (err, summ), (derr, desc), (terr, top), (nerr, n), (kerr, none), (perr, py) = calls(
        traces, ("trace_summary", {"trace": rec}), ("describe_thread", {"trace": rec}),
        ("top_calls", {"trace": gpu, "what": "cuda", "limit": 5}),
        ("sql", {"trace": gpu, "query": "select count(*) from slice where category = 'cuda' and name = 'cudaLaunchKernel'"}),
        ("top_calls", {"trace": rec, "what": "kernels"}), ("top_calls", {"trace": rec, "what": "python"}))
    assert not err, summ
    assert "sched_setaffinity" in summ["command"]
    assert summ["complete"] is True and summ["families"]["sched"] is True
    main = summ["main_thread"]
    assert main and any("training process (main thread)" in p["roles"] for p in summ["processes"]["listed"])

    assert not derr, desc
    assert desc["thread"]["tid"] == main["tid"]
    shares = {s["code"]: s["share"] for s in desc["states"]}
    assert shares.get("Running", 0) > 0 and sum(shares.values()) <= 1.0001
    # its running time over the whole trace, as the sql tool counts it
    (err, rows), = calls(traces, ("sql", {"trace": rec, "query": f"""
        select sum(s.dur) from thread_state s join thread t using (utid)
        where t.tid = {main['tid']} and s.state = 'Running'"""}))
    assert not err, rows
    running_ms = next(s["ms"] for s in desc["states"] if s["code"] == "Running")
    assert abs(running_ms - rows["rows"][0][0] / 1e6) < 0.01 + running_ms * 1e-3

    assert not terr, top
    totals = [r["total_ms"] for r in top["rows"]]
    assert totals == sorted(totals, reverse=True) and len(totals) == 5
    launch = next(r for r in top["rows"] if r["name"] == "cudaLaunchKernel")
    assert not nerr and n["rows"] == [[launch["count"]]]
    assert not kerr and none["rows"] == [] and "no GPU kernels" in none["note"]
    assert not perr, py
    assert py["thread"]["tid"] == main["tid"] and py["samples"] > 0
    assert py["rows"][0]["function"] == "spin" and py["rows"][0]["file"] == "<string>"  # python -c
    assert py["rows"][0]["self_samples"] == max(r["self_samples"] for r in py["rows"])


def test_ranks_are_named_and_described(traces):
    (err, summ), (derr, desc), (nerr, text) = calls(
        traces, ("trace_summary", {"trace": traces["ranks"]}),
        ("describe_thread", {"trace": traces["ranks"], "rank": 1}),
        ("describe_thread", {"trace": traces["ranks"], "rank": 5}))
    assert not err, summ
    by_rank = {role: p["pid"] for p in summ["processes"]["listed"] for role in p["roles"] if role.startswith("rank")}
    assert sorted(by_rank) == ["rank 0", "rank 1"]
    assert not derr, desc
    assert desc["thread"]["pid"] == by_rank["rank 1"] == desc["thread"]["tid"]
    assert desc["thread"]["picked"] == "main thread of rank 1"
    assert max(desc["states"], key=lambda s: s["ms"])["state"] == "sleeping"  # `sleep 0.3`
    assert nerr and "no rank 5 in this trace (ranks: [0, 1])" in text


def test_sql_is_read_only_and_limited(traces):
    path = traces["recorded"]
    writing = ("create table t as select 1", "select 1; drop table slice",
               "attach database '/tmp/timeline-mcp-test.db' as x", "pragma writable_schema = 1",
               "with x as (select 1) insert into t select * from x")
    *answers, (err, res), (err2, res2) = calls(
        traces, *[("sql", {"trace": path, "query": q}) for q in writing],
        ("sql", {"trace": path, "query": "select ts, dur from sched order by ts", "max_rows": 7}),
        ("sql", {"trace": path, "query": "select 1 as one -- a comment at the end"}))
    for query, (werr, text) in zip(writing, answers):
        assert werr and "refused" in text and "read-only" in text, (query, text)
    assert not os.path.exists("/tmp/timeline-mcp-test.db")
    assert not err, res
    assert res["columns"] == ["ts", "dur"] and len(res["rows"]) == 7 and res["truncated"] is True
    ts = [r[0] for r in res["rows"]]
    assert ts == sorted(ts)
    assert not err2 and res2["rows"] == [[1]] and res2["truncated"] is False


def test_sql_time_limit_stops_the_query(traces):
    endless = ("with recursive c(x) as (select 1 union all select x + 1 from c where x < 1000000000000) "
               "select count(*) from c")

    async def work(session):
        t0 = time.monotonic()
        stopped = await session.call_tool("sql", {"trace": traces["recorded"], "query": endless, "timeout_s": 1},
                                          read_timeout_seconds=300)
        seconds = time.monotonic() - t0
        after = await session.call_tool("sql", {"trace": traces["recorded"], "query": "select 2"})
        return stopped, seconds, after

    stopped, seconds, after = with_session(traces, work)
    assert stopped.is_error and "time limit of 1 s" in stopped.content[0].text
    assert seconds < 120  # the endless query would never end; loading the trace is the rest
    assert not after.is_error and after.structured_content["rows"] == [[2]]  # the server goes on


def test_sudo_mode_lists_only_what_the_user_can_read(root, udir, monkeypatch):
    """Under sudo the traces are opened as the invoking user: one in a
    directory only root can enter is not listed."""
    from helpers import SUDO_NOBODY
    from timeline.identity import invoking_user
    from timeline.mcp.paths import AllowedDirs, find_traces

    private = os.path.join(udir, "private")
    os.mkdir(private, 0o700)  # root's
    for path in (os.path.join(udir, "mine.pftrace"), os.path.join(private, "hidden.pftrace")):
        with open(SAMPLE_GPU, "rb") as src, open(path, "wb") as dst:
            dst.write(src.read(4096))
        os.chmod(path, 0o644)
    for k, v in SUDO_NOBODY.items():
        monkeypatch.setenv(k, v)
    user = invoking_user()
    assert user.sudo and user.uid != 0
    got = find_traces(AllowedDirs([udir]), user=user)
    assert [os.path.basename(t["path"]) for t in got["traces"]] == ["mine.pftrace"]
    monkeypatch.delenv("SUDO_UID")
    assert len(find_traces(AllowedDirs([udir]), user=invoking_user())["traces"]) == 2  # as root: both


def test_diff_tool_is_timeline_diff(traces):
    """diff_traces through the real timeline.diff: the same document as `timeline diff --format json`;
    options an agent may not set (the engine, whose identity) are refused."""
    a, b = traces["recorded"], traces["ranks"]
    (err, got), (err2, text) = calls(traces, ("diff_traces", {"baseline": a, "candidate": b, "options": {"checks": False}}),
                                     ("diff_traces", {"baseline": a, "candidate": b, "options": {"user": 0}}))
    assert not err, got
    r = timeline_cmd("diff", a, b, "--format", "json", "--no-checks")
    assert r.returncode == 0, r.stderr
    assert got["diff"] == json.loads(r.stdout)
    assert got["baseline"] == a and got["candidate"] == b
    assert err2 and "unknown diff option 'user'" in text, text
