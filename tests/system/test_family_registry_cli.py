"""The registry as `timeline record --help` shows it. The registry itself:
tests/unit/test_family_registry.py.
"""
from timeline import registry
from timeline.family import option_fields
from helpers import timeline_cmd


def test_every_family_and_option_in_help():
    cp = timeline_cmd("record", "--help")
    assert cp.returncode == 0
    text = " ".join(cp.stdout.split())
    for fam in registry.FAMILY_LIST:
        if not fam.always_on:
            assert f"{fam.name}:" in text, fam.name
        for fld in option_fields(fam.options):
            assert fld.metadata["flags"][0] in text, fld.name
        for ring in fam.rings:
            if ring.map:
                assert f"{fam.name} {ring.default_bytes / (1 << 20):g}" in text, fam.name
