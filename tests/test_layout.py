"""The BPF objects' ABI as seen from Python: struct layouts, names, constants."""
import os
import re

import pytest

from timeline import bpf_session, events, libbpf, registry
from timeline.btf_layout import Btf, section_globals
from helpers import REPO

OBJECTS = {f.bpf_object for f in registry.FAMILY_LIST if f.bpf_object}
BPF_RINGS = sorted(r.id for f in registry.FAMILY_LIST if f.bpf_object for r in f.rings)


def obj_path(name):
    path = bpf_session.object_path(name)
    assert os.path.exists(path), f"{path} missing: run python -m timeline.bpf.build"
    return path


@pytest.mark.parametrize("ring", BPF_RINGS)
def test_record_layout_matches_btf(ring):
    cname, dtype = registry.RINGS[ring].struct, registry.RINGS[ring].dtype
    fam = registry.RING_FAMILY[ring]
    size, members = Btf.from_object(obj_path(fam.bpf_object)).struct_layout(cname)
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
    for fam in registry.FAMILY_LIST:
        if not fam.bpf_object:
            continue
        obj = libbpf.BPFObject(obj_path(fam.bpf_object))
        try:
            progs = obj.programs()
            assert sorted(progs) == sorted(fam.programs + fam.plugin_programs)
            for ring in fam.rings:
                assert ring.map in obj.map_names()
                # the descriptor's default size is the object's own
                assert obj.map(ring.map).max_entries == ring.default_bytes, ring.map
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
