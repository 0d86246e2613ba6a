"""Bad arguments and bad input files give one line, never a traceback (issue 16)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import REPO, timeline_cmd
from rawlog_factory import scenario
from timeline.rawlog import KIND_META, RawLogWriter


def one_line_error(res, rc=2):
    err = res.stderr if isinstance(res.stderr, str) else res.stderr.decode("utf-8", "replace")
    assert res.returncode == rc, (res.returncode, err)
    assert "Traceback" not in err, err
    assert "error" in err.lower(), err
    return err


@pytest.mark.parametrize("args", [
    ["--pid", "2147483648"], ["--pid", "0"], ["--pid", "-5"],
    ["--flush-interval", "-1"], ["--flush-interval", "0"], ["--flush-interval", "nan"],
    ["--duration", "0"], ["--duration", "nan"], ["--duration", "-1"], ["--duration", "inf"],
])
def test_record_rejects_bad_numbers(tmp_path, args):
    command = [] if args[0] == "--pid" else ["--", "/bin/true"]  # a command with --pid is refused earlier
    res = timeline_cmd("record", "-o", str(tmp_path / "t.pftrace"), *args, *command, cwd=REPO)
    one_line_error(res)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("size", ["4096", "3", "0"])
def test_record_rejects_bad_buffer_size_in_one_line(tmp_path, size):
    err = one_line_error(timeline_cmd("record", "-o", str(tmp_path / "t.pftrace"), "--buffer-size", size,
                                      "--", "/bin/true", cwd=REPO))
    assert "--buffer-size" in err and len(err.strip().splitlines()) == 1, err
    assert os.listdir(tmp_path) == []


def test_record_repeated_family_is_recorded_once(tmp_path):
    out = tmp_path / "t.pftrace"
    res = timeline_cmd("record", "-q", "-o", str(out), "-e", "sched,sched", "--", "/bin/true", cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in str(res.stderr) and out.stat().st_size > 0


def test_record_and_convert_reject_empty_output(tmp_path):
    err = one_line_error(timeline_cmd("record", "-o", "", "--", "/bin/true", cwd=tmp_path,
                                      env={**os.environ, "PYTHONPATH": REPO}))
    assert "needs a file name" in err
    assert os.listdir(tmp_path) == []  # no .tlraw nor .tl-convert-* left behind
    raw = scenario(tmp_path / "a.tlraw")
    one_line_error(timeline_cmd("convert", raw, "-o", "", cwd=REPO))


def _raw_with_header_payload(path, payload: bytes) -> str:
    w = RawLogWriter(str(path), {})
    os.ftruncate(w.fd, 8)  # keep the magic, replace the header block
    os.lseek(w.fd, 8, os.SEEK_SET)
    w.write_block(KIND_META, payload)
    w.close()
    return str(path)


@pytest.mark.parametrize("payload", [b"{not json", b"[1, 2]", b'"header"', b'{"type": "header", "clock": 5}',
                                     b'{"type": "header", "clock": {"boottime_ns": "x"}}',
                                     b'{"type": "header", "ncpu": "many"}', b'{"type": "header", "rings": []}'])
def test_convert_bad_header_json(tmp_path, payload):
    raw = _raw_with_header_payload(tmp_path / "bad.tlraw", payload)
    one_line_error(timeline_cmd("convert", raw, "-o", str(tmp_path / "o.pftrace"), cwd=REPO))


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("tr")
    raw = scenario(d / "a.tlraw")
    res = timeline_cmd("convert", raw, "-o", str(d / "a.pftrace"), cwd=REPO)
    assert res.returncode == 0, res.stderr
    return str(d / "a.pftrace")


def test_query_non_utf8_sql(small_trace, tmp_path):
    res = subprocess.run([sys.executable, "-m", "timeline.cli", "query", small_trace, b"select \xff"],
                         capture_output=True, cwd=REPO, timeout=120)
    assert "not valid UTF-8" in one_line_error(res)
    f = tmp_path / "q.sql"
    f.write_bytes(b"select '\xfe'")
    res = timeline_cmd("query", small_trace, "-f", str(f), cwd=REPO)
    assert "not valid UTF-8" in one_line_error(res)


@pytest.mark.parametrize("value", ["0", "-1", "0.001"])
def test_check_window_param_validated(small_trace, value):
    t = time.monotonic()
    res = timeline_cmd("check", small_trace, "--param", f"cpu_contention.window_s={value}", cwd=REPO)
    assert "cpu_contention.window_s must be" in one_line_error(res)
    assert time.monotonic() - t < 30


@pytest.mark.parametrize("param", ["input_stall.warn_fraction=1.5", "block_io.p99_warn_ms=-3"])
def test_check_params_out_of_range(small_trace, param):
    one_line_error(timeline_cmd("check", small_trace, "--param", param, cwd=REPO))


@pytest.mark.parametrize("only", [",", " , ,", ""])
def test_check_only_naming_nothing_is_an_error(small_trace, only):
    assert "names no check" in one_line_error(timeline_cmd("check", small_trace, "--only", only, cwd=REPO))


def _chrome_gz(path, n=20000) -> bytes:
    import gzip
    import json
    doc = {"traceEvents": [{"name": f"s{i}", "ph": "X", "ts": i, "dur": 1, "pid": 1, "tid": 1} for i in range(n)]}
    data = gzip.compress(json.dumps(doc).encode())
    path.write_bytes(data)
    return data


def test_query_truncated_or_corrupt_gzip(tmp_path):
    data = _chrome_gz(tmp_path / "ok.json.gz")
    assert timeline_cmd("query", str(tmp_path / "ok.json.gz"), "select count(*) from slice", cwd=REPO).returncode == 0
    (tmp_path / "half.json.gz").write_bytes(data[: len(data) // 2])
    err = one_line_error(timeline_cmd("query", str(tmp_path / "half.json.gz"), "select * from thread", cwd=REPO))
    assert "truncated gzip" in err
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0xFF
    (tmp_path / "bad.json.gz").write_bytes(bytes(bad))
    err = one_line_error(timeline_cmd("check", str(tmp_path / "bad.json.gz"), cwd=REPO))
    assert "corrupt gzip" in err


def test_query_on_raw_log_points_at_convert(tmp_path):
    raw = scenario(tmp_path / "a.tlraw")
    err = one_line_error(timeline_cmd("query", raw, "select 1", cwd=REPO))
    assert "raw log" in err and "timeline convert" in err


def test_ctrl_c_stops_a_long_wasm_query(small_trace):
    sql = ("with recursive c(x) as (select 1 union all select x + 1 from c where x < 1000000000) "
           "select count(*) from c")
    p = subprocess.Popen([sys.executable, "-m", "timeline.cli", "query", small_trace, "--engine", "wasm", sql],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    time.sleep(5)  # loaded and deep in the query
    assert p.poll() is None
    t = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert time.monotonic() - t < 3
    assert p.returncode == 130, err
    assert err.decode().strip() == "timeline: interrupted"


@pytest.mark.parametrize("args", [("check", "--format", "xml", "x.pftrace"), ("convert",), ("no-such-command",),
                                  ("query", "--engine", "fast", "x.pftrace", "select 1"),
                                  ("view", "--port", "99999", "x.pftrace")])
def test_usage_errors_are_one_line(args):
    cp = timeline_cmd(*args)
    assert cp.returncode == 2
    lines = [ln for ln in cp.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("timeline: error: ") and "--help" in lines[0], cp.stderr


@pytest.mark.parametrize("delay", [0.05, 0.15, 0.3])
def test_ctrl_c_while_starting_is_one_line(delay):
    """Ctrl-C while the commands are still being imported: one line, no traceback."""
    import signal as sig
    import time

    p = subprocess.Popen([sys.executable, "-m", "timeline.cli", "query", "/nonexistent", "select 1"],
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: sig.signal(sig.SIGINT, sig.SIG_DFL))
    time.sleep(delay)
    p.send_signal(sig.SIGINT)
    err = p.communicate(timeout=30)[1]
    if "Fatal Python error: init_import_site" in err:
        # (on a loaded machine the signal can land while CPython itself still imports `site`,
        # before any of timeline runs: CPython's own message, nothing of ours to judge)
        assert "/timeline/" not in err, err  # no frame of the package (site's editable-install hook is not it)
        return
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert p.returncode in (130, 2, -2), err  # interrupted; or it had answered (then SIGINT may end it at exit)
