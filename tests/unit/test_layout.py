"""The BPF objects' ABI as seen from Python: struct layouts, names, constants.

Each ring's record is defined once, in the header its descriptor names
(Ring.header, beside the family's code), and mirrored once, by the dtype
module of the same name; both are checked here against the compiler: the
BTF of the built objects for layouts, cc for the constants."""
import importlib
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np
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


def mirror_module(header: str) -> str:
    """cuda/records.h -> timeline.cuda.records"""
    return "timeline." + header[:-len(".h")].replace("/", ".")


def headers() -> list[str]:
    root = os.path.join(REPO, "timeline")
    return [os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names
            if n.endswith(".h") and n != "vmlinux.h"]


def read(header: str) -> str:
    return open(os.path.join(REPO, "timeline", header)).read()


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


# The headers a Python module mirrors constant for constant (TL_X -> X): the
# shared one, and every BPF family's.  gpu/records.h names its constants
# differently; tests/unit/test_gpu_records.py checks it.
MIRRORS = [("bpf/events.h", "timeline.events")] + sorted(
    {(r.header, mirror_module(r.header)) for f in registry.FAMILY_LIST if f.bpf_object for r in f.rings})


def header_values(header: str) -> dict[str, int]:
    """Every object-like TL_* macro of a header, as the C compiler evaluates it."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, "a C compiler is needed to read the headers' constants"
    path = os.path.join(REPO, "timeline", header)
    names = re.findall(r"^#define\s+(TL_\w+)(?!\()\s", open(path).read(), re.M)
    assert names, f"{header}: no constants parsed"
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "values.c"), os.path.join(tmp, "values")
        with open(src, "w") as f:
            f.write(f'#include <stdio.h>\n#include <linux/types.h>\n#include "{path}"\nint main(void) {{\n')
            f.writelines(f'printf("{n} %lld\\n", (long long)({n}));\n' for n in names)
            f.write("return 0;\n}\n")
        subprocess.run([cc, "-o", exe, src], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split()
    return {out[i]: int(out[i + 1]) for i in range(0, len(out), 2)}


@pytest.mark.parametrize("header,module", MIRRORS)
def test_header_constants_match_python(header, module):
    mirror = importlib.import_module(module)
    for cname, value in header_values(header).items():
        assert getattr(mirror, cname[3:], None) == value, f"{header}: {cname} = {value}"


def test_drop_groups_do_not_overlap():
    groups = [events.DROP_FULL, events.DROP_REFUSED, events.DROP_RETRIED, events.DROP_FILL, events.DROP_SLOTS]
    assert all(b - a == events.MAX_RINGS for a, b in zip(groups, groups[1:])), groups


@pytest.mark.parametrize("ring", sorted(registry.RINGS))
def test_each_ring_is_defined_once_beside_its_mirror(ring):
    """The descriptor's header defines the ring's id and struct; the dtype module
    of the same name beside it holds the descriptor's dtype and kinds."""
    r = registry.RINGS[ring]
    text = open(os.path.join(REPO, "timeline", r.header)).read()
    assert [int(v) for v in re.findall(r"^#define\s+TL_RING_\w+\s+(\d+)", text, re.M)] == [r.id], r.header
    assert re.search(rf"^struct {r.struct} {{", text, re.M), f"{r.header} does not define {r.struct}"
    mirror = importlib.import_module(mirror_module(r.header))
    assert any(v is r.dtype for v in vars(mirror).values()), f"{r.struct}'s dtype is not from {mirror.__name__}"
    assert r.kinds.__module__ == mirror.__name__
    # one definition: no other header of the package declares the struct
    others = [h for h in headers() if h != r.header and re.search(rf"struct {r.struct} {{", read(h))]
    assert not others, others


def test_shared_header_names_no_family():
    """events.h/events.py keep what every ring shares; no family's id, record or kinds."""
    text = read("bpf/events.h") + read("bpf/tracking.bpf.h")
    assert not re.search(r"TL_RING_\w+|struct tl_\w+_(event|record) {", text)
    fams = [f.name for f in registry.FAMILY_LIST]
    assert not [n for n in vars(events) if any(f in n.lower() for f in fams)]
    assert not [n for n, v in vars(events).items() if isinstance(v, (np.dtype, type))]
