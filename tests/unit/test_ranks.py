"""Rank fields from a process's environment (timeline/ranks.py)."""
import os
import subprocess
import sys

from timeline import ranks


def test_parse_torchrun_env():
    env = b"PATH=/bin\0RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=8\0HOME=/root\0"
    assert ranks.parse_environ(env) == {"rank": 3, "local_rank": 1, "world_size": 8}


def test_parse_launcher_fallbacks_and_priority():
    env = b"SLURM_PROCID=7\0OMPI_COMM_WORLD_RANK=5\0SLURM_NTASKS=16\0"
    # OMPI is listed before Slurm: an mpirun inside an allocation names the MPI rank
    assert ranks.parse_environ(env) == {"rank": 5, "world_size": 16}
    assert ranks.parse_environ(b"PMI_RANK=2\0PMI_SIZE=4\0") == {"rank": 2, "world_size": 4}


def test_parse_hostile_values_ignored():
    env = (b"RANK=-1\0LOCAL_RANK=\xff\xfe\0WORLD_SIZE=99999999999999\0"
           b"\xff\0=\0RANK\0LOCAL_RANK=\xd9\xa3\0OMPI_COMM_WORLD_RANK= 4\0PMI_RANK=6\0")
    # only PMI_RANK is a plain decimal number (Arabic-Indic digits are not)
    assert ranks.parse_environ(env) == {"rank": 6}
    assert ranks.parse_environ(b"") == {}
    assert ranks.parse_environ(b"\0\0\0") == {}


CHILD = [sys.executable, "-c", "import sys; print(flush=True); sys.stdin.read()"]


def test_read_live_process_and_bound():
    # one string may hold 128 KiB at most (MAX_ARG_STRLEN): pad with several
    env = {"RANK": "2", **{f"PAD{i}": "x" * 60000 for i in range(ranks.ENVIRON_MAX // 60000 + 1)},
           "PMI_SIZE": "9"}
    p = subprocess.Popen(CHILD, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         env={"RANK": "2", "WORLD_SIZE": "4"})
    q = subprocess.Popen(CHILD, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    # Popen returns when the child's exec released the old memory, before the new
    # image's environment is set up (/proc/PID/environ reads empty then): wait
    # until the children run. The recorder reads at the exec event, after set-up.
    p.stdout.readline(), q.stdout.readline()
    try:
        assert ranks.read_ranks(p.pid) == {"rank": 2, "world_size": 4}
        # PMI_SIZE lies past the bound (dicts keep order: it is last in environ): not read
        assert ranks.read_ranks(q.pid) == {"rank": 2}
        w = ranks.RankWatcher()
        got = w.poll({p.pid: 1, os.getpid(): 1})
        assert [g["pid"] for g in got] == [p.pid] and got[0]["rank"] == 2
        assert w.poll({p.pid: 1}) == []           # same image: not read again
        assert len(w.poll({p.pid: 2})) == 1       # exec: read again
    finally:
        for x in (p, q):
            x.communicate(b"")
    assert ranks.read_ranks(p.pid) == {}          # gone
    assert ranks.rank_label({"rank": 3}) == "rank 3" and ranks.rank_label({}) is None


def test_model_keeps_only_sane_rank_fields():
    """A raw log is untrusted input: odd "ranks" metas are ignored, not fatal."""
    from timeline.converters.model import LogModel, Process, _apply_ranks
    m = LogModel(path="x", size=0, header={})
    m.processes = {10: Process(10), 11: Process(11)}
    _apply_ranks(m, [{"processes": [None, 5, {"pid": "10", "rank": 1}, {"pid": 99, "rank": 2},
                                    {"pid": 10, "rank": 3, "world_size": True, "local_rank": -1, "evil": 1},
                                    {"pid": 11, "rank": 10 ** 12, "world_size": 4}]},
                     {"processes": "junk"}, {}])
    assert m.processes[10].ranks == {"rank": 3}
    assert m.processes[11].ranks == {"world_size": 4}
