"""Files named by the user or by the target, read as the user (issue 20).

Sudo is imitated as root with SUDO_UID/SUDO_GID=65534 (nobody), the inputs in
a directory nobody owns (the `udir` fixture).  Root must read nothing there
that nobody could not: a maps record naming a root-only file, a root-only or
symlinked trace; a FIFO is refused at once; a gzip bomb costs no memory.
Every refusal is one line."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

from helpers import NOBODY, SUDO_NOBODY, require_root, timeline_cmd
from rawlog_factory import BOOT0, LogBuilder, end_block, scenario

from timeline import events as ev
from timeline.cuda import records as cuda_records
from timeline.converters import convert
from timeline.cuda.probes import PROBES, Role, table_meta
from timeline.identity import InvokingUser

SECRET = b"ROOT-ONLY-KEY=7c41d9e2"
NOBODY_USER = InvokingUser(NOBODY, NOBODY, [NOBODY], "nobody", "/")
PID = 4100
BASE = 0x7F10_0000_0000  # where the crafted maps record says the file is mapped
HOST = BASE + 0x40       # the launched host stub, registered with a name at BASE


def sudo_env(**extra):
    return dict(os.environ, **SUDO_NOBODY, **extra)


def mine(path: str) -> str:
    os.chown(path, NOBODY, NOBODY)
    return path


def root_only(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)
    return path


def cuda_log(path: str, mapped: str) -> str:
    """A raw log whose one launch is named by a string the registration says
    lies at BASE, in the file a maps record says is mapped there: `mapped`."""
    b = LogBuilder()
    b.header["cuda"] = {"probes": table_meta(), "mode": "full"}
    b.header["rings"][str(cuda_records.RING_CUDA)] = {"name": "cuda", "record_size": cuda_records.CUDA_EVENT.itemsize,
                                           "stride": ev.ring_stride(cuda_records.CUDA_EVENT)}
    b.blocks.append(("meta", {"type": "maps", "pid": PID, "ts": BOOT0, "entries": [[BASE, BASE + 4096, 0, mapped]],
                              "env": {}}))
    register = next(p for p in PROBES if p.role == Role.REGISTER_FUNCTION)
    launch = next(p for p in PROBES if p.role == Role.LAUNCH_RT)
    recs = np.zeros(2, cuda_records.CUDA_EVENT)
    recs["tid"], recs["tgid"], recs["kind"], recs["flags"] = PID, PID, cuda_records.CUDA_CALL, cuda_records.CF_HAS_RET
    recs["cookie"] = [register.cookie(), launch.cookie()]
    recs["ts"], recs["dur"] = [BOOT0 + 1_000, BOOT0 + 2_000], [100, 500]
    recs["args"][0, 1], recs["args"][0, 3] = HOST, BASE  # __cudaRegisterFunction(host_fun, device_name)
    recs["args"][1, 0] = HOST                             # cudaLaunchKernel(func)
    b.blocks.append(("ring", (cuda_records.RING_CUDA, ev.encode_ring_bytes(recs))))
    return b.write(path, end_block(stop_ts=BOOT0 + 10_000))


def assert_one_line(cp, *words):
    assert cp.returncode == 2, (cp.returncode, cp.stderr)
    assert cp.stderr.startswith("timeline: error: ") and cp.stderr.count("\n") == 1, cp.stderr
    assert "Traceback" not in cp.stderr
    for w in words:
        assert w in cp.stderr, (w, cp.stderr)


# -- maps records at conversion ----------------------------------------------------

def test_maps_record_naming_a_root_only_file_leaks_nothing(udir):
    require_root()
    secret = root_only(os.path.join(udir, "root-only"), SECRET + b"\0" + b"x" * 4096)
    raw = mine(cuda_log(os.path.join(udir, "r.tlraw"), secret))
    # Control: as root without sudo the name is read from that file, so the log does reach it.
    out = os.path.join(udir, "root.json")
    convert(raw, out)
    with open(out, "rb") as f:
        assert SECRET in f.read()
    os.unlink(out)
    out = os.path.join(udir, "r.json")
    cp = timeline_cmd("convert", raw, "-o", out, env=sudo_env(), timeout=60)
    assert cp.returncode == 0, cp.stderr
    with open(out, "rb") as f:
        trace = f.read()
    assert SECRET.decode() not in cp.stdout + cp.stderr and SECRET not in trace
    assert b"root-only+0x40" in trace  # named by the file offset instead


def test_maps_record_naming_a_readable_file_still_names_the_kernel(udir):
    require_root()
    lib = mine(root_only(os.path.join(udir, "lib.so"), b"_Z6kernelv\0"))  # nobody's own, 0600
    raw = mine(cuda_log(os.path.join(udir, "r.tlraw"), lib))
    out = os.path.join(udir, "r.json")
    cp = timeline_cmd("convert", raw, "-o", out, env=sudo_env(), timeout=60)
    assert cp.returncode == 0, cp.stderr
    with open(out, "rb") as f:
        assert b'"kernel":"kernel()"' in f.read().replace(b" ", b"")


def test_maps_record_naming_a_fifo_does_not_hang_convert(udir):
    require_root()
    fifo = os.path.join(udir, "fifo")
    os.mkfifo(fifo, 0o666)
    raw = mine(cuda_log(os.path.join(udir, "r.tlraw"), fifo))
    out = os.path.join(udir, "r.pftrace")
    cp = timeline_cmd("convert", raw, "-o", out, env=sudo_env(), timeout=60)  # the old code waited forever
    assert cp.returncode == 0, cp.stderr
    assert sorted(os.listdir(udir)) == ["fifo", "r.pftrace", "r.tlraw"]  # no temporary file left
    # Root without sudo opens with the same rules.
    convert(raw, os.path.join(udir, "root.json"))
    assert sorted(os.listdir(udir)) == ["fifo", "r.pftrace", "r.tlraw", "root.json"]


# -- traces given to commands --------------------------------------------------------

@pytest.fixture
def inputs(udir, tmp_path):
    """nobody's own trace and raw log, and root-only ones, a symlink to each
    root-only one and a FIFO, all in nobody's directory."""
    raw = scenario(str(tmp_path / "s.tlraw"))
    trace = str(tmp_path / "s.pftrace")
    convert(raw, trace)
    out = {}
    for name, src in (("trace", trace), ("raw", raw)):
        with open(src, "rb") as f:
            data = f.read()
        out[name] = mine(root_only(os.path.join(udir, "mine-" + os.path.basename(src)), data))
        out[name + "_root_only"] = root_only(os.path.join(udir, "root-" + os.path.basename(src)), data)
        out[name + "_link"] = os.path.join(udir, "link-" + os.path.basename(src))
        os.symlink(out[name + "_root_only"], out[name + "_link"])
    out["fifo"] = os.path.join(udir, "fifo.pftrace")
    os.mkfifo(out["fifo"], 0o666)
    out["dir"] = udir
    return out


COMMANDS = {
    "check": lambda f, i: ["check", f],
    "query": lambda f, i: ["query", f, "select 1"],
    "merge": lambda f, i: ["merge", i["trace"], f, "-o", os.path.join(i["dir"], "m.pftrace")],
    "view": lambda f, i: ["view", "--no-browser", "--port", "0", f],
    "annotate": lambda f, i: ["check", f, "--annotate", os.path.join(i["dir"], "a.pftrace")],
}
REFUSALS = {"root_only": ("cannot read", "Permission denied"), "link": ("symbolic link",),
            "fifo": ("not a regular file",)}


@pytest.mark.parametrize("kind", sorted(REFUSALS))
@pytest.mark.parametrize("cmd", sorted(COMMANDS))
def test_trace_inputs_are_read_as_the_user(inputs, cmd, kind):
    require_root()
    name = inputs["fifo"] if kind == "fifo" else inputs["trace_" + kind]
    before = sorted(os.listdir(inputs["dir"]))
    cp = timeline_cmd(*COMMANDS[cmd](name, inputs), env=sudo_env(), timeout=60)
    assert_one_line(cp, *REFUSALS[kind])
    assert sorted(os.listdir(inputs["dir"])) == before  # nothing written


@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_convert_input_is_read_as_the_user(inputs, kind):
    """A raw log given to convert: opened as the user, never through a link; a FIFO is refused at once."""
    require_root()
    name = inputs["fifo"] if kind == "fifo" else inputs["raw_" + kind]
    before = sorted(os.listdir(inputs["dir"]))
    cp = timeline_cmd("convert", name, "-o", os.path.join(inputs["dir"], "c.pftrace"), env=sudo_env(), timeout=15)
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and "Traceback" not in cp.stderr, cp.stderr
    assert sorted(os.listdir(inputs["dir"])) == before


def test_users_own_trace_is_annotated(inputs):
    """The control for the refusals above: nobody's own trace goes through."""
    require_root()
    out = os.path.join(inputs["dir"], "a.pftrace")
    cp = timeline_cmd("check", inputs["trace"], "--annotate", out, env=sudo_env(), timeout=120)
    assert cp.returncode == 0, cp.stderr
    st = os.stat(out)
    assert st.st_uid == NOBODY and st.st_size > os.path.getsize(inputs["trace"])


def test_query_sql_file_is_read_as_the_user(inputs):
    require_root()
    sql = root_only(os.path.join(inputs["dir"], "q.sql"), b"select '" + SECRET + b"' as x")
    cp = timeline_cmd("query", inputs["trace"], "-f", sql, env=sudo_env(), timeout=60)
    assert_one_line(cp, "cannot read", "Permission denied")
    assert SECRET.decode() not in cp.stdout + cp.stderr
    mine(sql)
    cp = timeline_cmd("query", inputs["trace"], "-f", sql, "--format", "csv", env=sudo_env(), timeout=60)
    assert cp.returncode == 0 and SECRET.decode() in cp.stdout, cp.stderr


# -- merge: a gzip bomb -----------------------------------------------------------

def gzip_of_zeros(path: str, gib: int) -> str:
    """A gzip file that decompresses to `gib` GiB of zeros, written in a
    moment: one fully flushed deflate block of 1 MiB of zeros, repeated."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    c.compress(bytes(1 << 20))
    c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)  # no reference to earlier data
    crc = zlib.crc32(bytes(1 << 20))
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\0\0\0\0\x00\x03")
        for _ in range(gib << 10):
            f.write(block)
        f.write(c.flush())
        # (the trailer's CRC is of 1 MiB only: nothing reads that far)
        f.write(struct.pack("<II", crc, (gib << 30) & 0xFFFFFFFF))
    return path


_MAX_RSS = """
import resource, subprocess, sys
cp = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(cp.stderr)
sys.stderr.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))
sys.exit(cp.returncode)
"""


def test_merge_of_a_gzip_bomb_is_one_line_in_bounded_memory(inputs):
    require_root()
    bomb = mine(gzip_of_zeros(os.path.join(inputs["dir"], "bomb.pftrace"), 3))
    assert os.path.getsize(bomb) < 4 << 20
    out = os.path.join(inputs["dir"], "m.pftrace")
    # A 1 GiB cap instead of 4 GiB keeps the test quick; the memory bound is the same.
    env = sudo_env(TIMELINE_MAX_TRACE_BYTES=str(1 << 30))
    cp = subprocess.run([sys.executable, "-c", _MAX_RSS, sys.executable, "-m", "timeline.cli", "merge",
                         inputs["trace"], bomb, "-o", out], env=env, capture_output=True, text=True, timeout=120)
    rss = int(cp.stderr)
    assert cp.returncode == 2 and cp.stdout.count("\n") == 1, cp.stdout
    assert cp.stdout.startswith("timeline: error: ") and "decompresses to more than 1 GiB" in cp.stdout, cp.stdout
    assert rss < 400 << 20, rss  # the old merge held the 3 GiB it decompressed
    assert not os.path.exists(out)
