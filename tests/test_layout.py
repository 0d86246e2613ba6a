"""The BPF objects' ABI as seen from Python: struct layouts, names, constants."""
import os
import re

import pytest

from timeline import bpf_session, events, libbpf
from timeline.btf_layout import Btf, section_globals
from helpers import REPO

OBJECTS = {f.object for f in bpf_session.FAMILIES.values()}


def obj_path(name):
    path = bpf_session.object_path(name)
    assert os.path.exists(path), f"{path} missing: run python -m timeline.bpf.build"
    return path


@pytest.mark.parametrize("ring", sorted(events.RING_STRUCTS))
def test_record_layout_matches_btf(ring):
    cname, dtype = events.RING_STRUCTS[ring]
    fam = next(f for f in bpf_session.FAMILIES.values() if f.ring_id == ring)
    size, members = Btf.from_object(obj_path(fam.object)).struct_layout(cname)
    assert size == dtype.itemsize
    assert list(members) == list(dtype.names)
    for name, (off, sz) in members.items():
        field_dtype, field_off = dtype.fields[name][:2]
        assert (field_off, field_dtype.itemsize) == (off, sz), name


def test_every_object_agrees_on_shared_struct_layouts():
    # Both objects embed tl_proc_event/tl_sched_event only if they use them,
    # but every object defines the shared maps with identical key/value sizes.
    for name in OBJECTS:
        obj = libbpf.BPFObject(obj_path(name))
        try:
            assert obj.map("tracked").key_size == 4 and obj.map("tracked").value_size == 8
            assert obj.map("drops").value_size == 8 and obj.map("drops").max_entries == events.DROP_SLOTS
        finally:
            obj.close()


def test_program_and_map_names_are_the_loader_api():
    for fam in bpf_session.FAMILIES.values():
        obj = libbpf.BPFObject(obj_path(fam.object))
        try:
            progs = obj.programs()
            assert sorted(progs) == sorted(fam.programs + fam.plugin_programs)
            assert fam.ring_map in obj.map_names()
            for shared in bpf_session.SHARED_MAPS:
                assert shared in obj.map_names()
        finally:
            obj.close()
    assert "launcher_tgid" in section_globals(obj_path("proc.bpf.o"), ".rodata")


def test_header_constants_match_python():
    text = open(os.path.join(REPO, "timeline", "bpf", "events.h")).read()
    defines = dict(re.findall(r"#define (TL_\w+)\s+(\d+)", text))
    assert defines, "no constants parsed"
    for cname, value in defines.items():
        pyname = cname[3:]
        assert getattr(events, pyname) == int(value), cname
