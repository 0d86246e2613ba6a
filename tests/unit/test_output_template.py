"""`-o` templates (commands/output.expand_template) and their CLI errors."""
import pytest

from timeline.commands.output import expand_template
from timeline.errors import UserError

T0 = 1_700_000_000.0


def expand(t, env=None, host="node-7"):
    return expand_template(t, host=host, pid=4242, env=env or {}, when=T0)


def test_fields():
    import time
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(T0))
    assert expand("run_%h_%p_%t.pftrace") == f"run_node-7_4242_{stamp}.pftrace"
    assert expand("r%r.json", {"RANK": "3"}) == "r3.json"
    assert expand("r%r", {"SLURM_PROCID": "12", "OMPI_COMM_WORLD_RANK": "5"}) == "r5"  # MPI before Slurm
    assert expand("100%%_%h", host="a/b\x1bc") == "100%_a_b_c"  # no path or escape from a host name
    assert expand("plain.pftrace") == "plain.pftrace"


@pytest.mark.parametrize("bad", ["x%q", "x%", "x%\x1b"])
def test_unknown_is_user_error(bad):
    with pytest.raises(UserError):
        expand(bad)


def test_rank_missing_or_hostile():
    for env in ({}, {"RANK": "-1"}, {"RANK": "\u0663"}, {"RANK": "1" * 20}):
        with pytest.raises(UserError, match="%r"):
            expand("r%r", env)
