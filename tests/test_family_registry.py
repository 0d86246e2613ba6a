"""The family registry (timeline/registry.py) is consistent, and every table is derived from it.

Record layouts against BTF: tests/test_layout.py (parametrized over the registry's rings).
"""
import ast
import dataclasses
import enum
import os
import subprocess
import sys

from timeline import events, registry
from timeline.family import Family, Ring, option_fields
from helpers import REPO, timeline_cmd


def test_ring_ids_unique_and_below_max_rings():
    assert registry.ring_id_conflicts() == []
    assert len(registry.RINGS) == sum(len(f.rings) for f in registry.FAMILY_LIST)
    names = [f.name for f in registry.FAMILY_LIST]
    assert len(names) == len(set(names)) and all(n.isidentifier() for n in names)


def test_ring_id_checker_catches_collisions():
    """Made-up families: one claiming cuda's id, ids at and past the limit, id 0."""
    cuda = registry.FAMILIES["cuda"]

    def fam(name, *ids):
        return dataclasses.replace(cuda, name=name, rings=tuple(dataclasses.replace(cuda.rings[0], id=i) for i in ids))

    clash = registry.ring_id_conflicts((*registry.FAMILY_LIST, fam("nvtx", cuda.rings[0].id)))
    assert clash == [f"ring id {cuda.rings[0].id} is claimed by both cuda and nvtx"]
    assert len(registry.ring_id_conflicts((fam("a", 9), fam("b", 9), fam("c", 9)))) == 2
    assert len(registry.ring_id_conflicts((fam("two", 9, 9),))) == 1
    top = events.MAX_RINGS - 1
    assert registry.ring_id_conflicts((fam("last", top),)) == []
    for bad in (events.MAX_RINGS, events.MAX_RINGS + 5, 0, -1):
        (line,) = registry.ring_id_conflicts((fam("nvtx", bad),))
        assert f"ring id {bad} is outside 1..{top}" in line
    # the limit is a parameter: 8 was the old one, where ids 1-7 were all taken
    assert registry.ring_id_conflicts((fam("eighth", 8),), max_rings=8)


def test_descriptors_are_frozen_and_complete():
    for fam in registry.FAMILY_LIST:
        assert isinstance(fam, Family) and fam.help and fam.rings
        try:
            fam.__setattr__("name", "x")
        except dataclasses.FrozenInstanceError:
            pass
        else:
            raise AssertionError("Family is mutable")
        for ring in fam.rings:
            assert isinstance(ring, Ring)
            assert "kind" in ring.dtype.names, ring.struct
            # a BPF ring has its map and default size; a ring a plugin writes has neither
            assert bool(ring.map) == bool(fam.bpf_object) == bool(ring.default_bytes), ring
        if not fam.bpf_object:
            assert fam.plugin and not fam.programs, f"{fam.name}: records without BPF come from its plugin"


def test_every_record_kind_has_one_name():
    for ring in registry.RINGS.values():
        assert issubclass(ring.kinds, enum.IntEnum) and len(ring.kinds) > 0
        assert all(int(k) > 0 for k in ring.kinds)
    names = list(registry.KIND_NAMES.values())
    assert len(names) == len(set(names)), names
    assert len(registry.KIND_NAMES) == sum(len(r.kinds) for r in registry.RINGS.values())


def test_every_option_has_one_default_and_one_flag():
    params, flags = set(), set()
    for fam in registry.FAMILY_LIST:
        for fld in option_fields(fam.options):
            assert fld.default is not dataclasses.MISSING, f"{fam.name}.{fld.name} has no default"
            assert fld.default_factory is dataclasses.MISSING, f"{fam.name}.{fld.name}: one plain default"
            assert fld.metadata["flags"] and fld.metadata["help"], fld.name
            assert fld.name not in params and not flags & set(fld.metadata["flags"]), fld.name
            params.add(fld.name)
            flags |= set(fld.metadata["flags"])
        if fam.options:
            assert dataclasses.is_dataclass(fam.options) and fam.options.__dataclass_params__.frozen
    # the options built from command-line values keep the descriptor's defaults
    defaults = registry.family_options({})
    for fam in registry.FAMILY_LIST:
        if fam.options:
            assert defaults[fam.name] == fam.options()


def test_no_option_default_elsewhere():
    """Options are read from the family's dataclass, not getattr(cfg, name, default)."""
    for root, _, files in os.walk(os.path.join(REPO, "timeline")):
        for name in files:
            if name.endswith(".py"):
                text = open(os.path.join(root, name)).read()
                assert "getattr(cfg," not in text, os.path.join(root, name)


def test_derived_tables():
    from timeline import recorder, recorder_plugins  # noqa: F401
    from timeline.bpf_session import FAMILIES
    from timeline.converters import families
    assert FAMILIES is registry.FAMILIES and recorder.KIND_NAMES is registry.KIND_NAMES
    assert recorder.DEFAULT_EVENTS is registry.DEFAULT_EVENTS
    assert families.REGISTRY == tuple(c for f in registry.FAMILY_LIST for c in f.converters)
    assert set(registry.PLUGINS) == {f.name for f in registry.FAMILY_LIST if f.plugin}
    assert all(registry.FAMILIES[n].default_on for n in registry.DEFAULT_EVENTS)


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


def test_plugins_and_converters_resolve():
    from timeline.family import load_spec
    for fam in registry.FAMILY_LIST:
        for spec in (fam.plugin, fam.prepare, *fam.converters):
            if spec:
                assert callable(load_spec(spec)), spec


def _imports(path):
    tree = ast.parse(open(path).read())
    pkg = os.path.relpath(os.path.dirname(path), REPO).replace(os.sep, ".")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = pkg.split(".")
            mod = node.module or ""
            if node.level:
                base = base[:len(base) - node.level + 1]
                mod = ".".join([*base, mod]) if mod else ".".join(base)
            yield mod
            yield from (f"{mod}.{a.name}" for a in node.names)


def test_only_commands_import_the_recorder():
    """Core depends on descriptors, families on core: nothing but the CLI commands imports timeline.recorder."""
    offenders = []
    for root, _, files in os.walk(os.path.join(REPO, "timeline")):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, REPO)
            if not name.endswith(".py") or rel.startswith(os.path.join("timeline", "commands")):
                continue
            if rel == os.path.join("timeline", "recorder.py"):
                continue
            if any(m == "timeline.recorder" for m in _imports(path)):
                offenders.append(rel)
    assert not offenders


def test_core_imports_no_family_code():
    """Importing the recorder, session and converters loads no plugin or converter of a family
    (only descriptors and the dtype modules they name)."""
    code = ("import sys; import timeline.recorder, timeline.bpf_session, timeline.converters; "
            "print(' '.join(m for m in sys.modules if m.startswith(('timeline.cuda.', 'timeline.kctx.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    dtype_modules = {"timeline." + r.header[:-2].replace("/", ".") for r in registry.RINGS.values()}
    assert set(out.split()) <= {"timeline.cuda.family", "timeline.kctx.family"} | dtype_modules, out
