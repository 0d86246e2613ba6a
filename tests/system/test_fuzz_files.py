"""Fuzz the commands that read files (issue 14): random, truncated and
bit-flipped raw logs, Perfetto traces and gzip'd Chrome JSON given to convert,
check, query and view. Each run ends in a valid output or one line on stderr,
never a traceback. Seeds are fixed; every case is bounded in time."""
from __future__ import annotations

import random
import select
import signal
import subprocess
import sys

import pytest

from helpers import timeline_cmd
from rawlog_factory import scenario
from timeline.converters import convert

CASES_PER_KIND = 3
SEEDS = {".tlraw": 11, ".pftrace": 12, ".json.gz": 13}


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    d = tmp_path_factory.mktemp("orig")
    raw = scenario(str(d / "run.tlraw"))
    convert(raw, str(d / "run.pftrace"), fmt="perfetto")
    convert(raw, str(d / "run.json.gz"), fmt="chrome")
    return {k: (d / f"run{k}").read_bytes() for k in (".tlraw", ".pftrace", ".json.gz")}


def mutations(data: bytes, seed: int):
    rnd = random.Random(seed)
    yield "random", bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 4096)))
    yield "empty", b""
    for _ in range(2):
        yield "truncated", data[: rnd.randint(1, max(1, len(data) - 1))]
    for _ in range(CASES_PER_KIND):
        b = bytearray(data)
        for _ in range(rnd.randint(1, 8)):
            i = rnd.randrange(len(b))
            b[i] ^= 1 << rnd.randrange(8)
        yield "bitflip", bytes(b)


def assert_clean(cp, what):
    assert "Traceback" not in cp.stderr, (what, cp.stderr[-2000:])
    if cp.returncode != 0:
        lines = [ln for ln in cp.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("timeline: error:") or ln.startswith("Error:")]
        assert len(errors) == 1, (what, cp.returncode, cp.stderr[-2000:])


@pytest.mark.parametrize("suffix", [".tlraw", ".pftrace", ".json.gz"])
def test_fuzzed_inputs(originals, tmp_path, suffix):
    for n, (kind, data) in enumerate(mutations(originals[suffix], seed=SEEDS[suffix])):
        path = tmp_path / f"case{n}{suffix}"
        path.write_bytes(data)
        what = f"{kind} {suffix} #{n}"
        if suffix == ".tlraw":
            cp = timeline_cmd("convert", "-q", str(path), "-o", str(tmp_path / f"out{n}.pftrace"), timeout=60)
            assert_clean(cp, "convert " + what)
            continue
        for args in (("check", str(path)), ("query", str(path), "select count(*) from slice")):
            cp = timeline_cmd(*args, timeout=120)
            assert_clean(cp, f"{args[0]} {what}")
        assert_view_clean(path, what)


def assert_view_clean(path, what):
    """view either refuses the file in one line or starts serving it (then it
    is stopped as soon as it prints its URL)."""
    p = subprocess.Popen([sys.executable, "-m", "timeline.cli", "view", "--no-browser", str(path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready, _, _ = select.select([p.stdout], [], [], 20)
    line = p.stdout.readline() if ready else ""
    if "http://127.0.0.1:" in line:
        p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    if "http://127.0.0.1:" not in line:
        assert_clean(subprocess.CompletedProcess(p.args, p.returncode, line + out, err), "view " + what)
