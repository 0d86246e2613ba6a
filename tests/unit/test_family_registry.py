"""The family registry (timeline/registry.py) is consistent, and every table is derived from it.

Record layouts against BTF: tests/unit/test_layout.py (parametrized over the registry's rings).
"""
import ast
import dataclasses
import enum
import importlib
import os
import subprocess
import sys

from timeline import events, registry
from timeline.family import Family, Ring, option_fields
from helpers import REPO


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
    importlib.import_module("timeline.recorder_plugins")  # its import must not change the tables
    from timeline import recorder
    from timeline.bpf_session import FAMILIES
    from timeline.converters import families
    assert FAMILIES is registry.FAMILIES and recorder.KIND_NAMES is registry.KIND_NAMES
    assert recorder.DEFAULT_EVENTS is registry.DEFAULT_EVENTS
    assert families.REGISTRY == tuple(c for f in registry.FAMILY_LIST for c in f.converters)
    assert set(registry.PLUGINS) == {f.name for f in registry.FAMILY_LIST if f.plugin}
    assert all(registry.FAMILIES[n].default_on for n in registry.DEFAULT_EVENTS)


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


# -- only the registry and the family packages name a family -----------------
# Words that name a family or what only one family records (the cuda and gpu
# families' libraries and APIs), besides the families' own names.
FAMILY_WORDS = ("cuda", "gpu", "nccl", "nvtx", "cupti")
# Where a family may be named outside its package, and why.  Each entry: (file,
# top-level name whose value is exempt, or "" for the whole file).
ALLOWED = {
    # the catalog's checks name the check data they need, and their ids: data
    # the families provide (Family.check_data; test_hook_names_are_claimed_once)
    ("timeline/checks/catalog.py", "CATALOG"),
    # timeline mcp's top_calls ranks the families' calls, kernels and samples: one table of them
    ("timeline/mcp/queries.py", "TOP_KINDS"),
    # build tooling: compiles the gpu family's injection library (python -m timeline.bpf.build)
    ("timeline/bpf/build_inject.py", ""),
}
# A check's partial is that check's definition in numpy (issue 23): like its SQL in
# timeline/checks/sql, it names the slice categories and calls it reads.
ALLOWED_DIRS = (os.path.join("timeline", "checks", "partials") + os.sep,)


def _core_family_names() -> set[str]:
    from timeline import core_families
    return {v.name for v in vars(core_families).values() if isinstance(v, Family)}


def _family_packages() -> set[str]:
    """Packages of the families not built into the core (timeline.cuda...), from
    their descriptors' plugins, converters, hooks and headers."""
    out = set()
    for fam in registry.FAMILY_LIST:
        if fam.name in _core_family_names():
            continue
        specs = [fam.plugin, fam.prepare, *fam.converters, fam.always_keep, fam.doctor,
                 *(c.window for c in fam.capture_ranges)]
        mods = [s.split(":")[0] for s in specs if s] + ["timeline." + r.header.rsplit("/", 1)[0]
                                                        for r in fam.rings if "/" in r.header]
        out |= {".".join(m.split(".")[:2]) for m in mods}
    return out


def _named_families(path: str, rel: str, names: set[str], packages: set[str]) -> list[str]:
    """What in a module's code (not its docstrings or comments) names a family:
    an import of a family package, an identifier with a family word or a ring
    constant of a family (RING_BLOCK), a string that is a name (no spaces) with
    a family word or equal to a family's name.  Prose may mention one."""
    tree = ast.parse(open(path).read())
    doc = {id(n.body[0].value) for n in ast.walk(tree)
           if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
           and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    exempt = set()
    for top in tree.body:
        targets = top.targets if isinstance(top, ast.Assign) else [top.target] if isinstance(top, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and (rel, t.id) in ALLOWED for t in targets):
            exempt |= {id(n) for n in ast.walk(top) if isinstance(n, ast.Constant)}
    words = FAMILY_WORDS + tuple(f"ring_{n}" for n in names)
    out = [f"{rel}: imports {m}" for m in _imports(path)
           if m in packages or m.startswith(tuple(p + "." for p in packages))]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if id(node) in doc or id(node) in exempt or any(c.isspace() for c in text):
                continue
            if text in names or any(w in text.lower() for w in FAMILY_WORDS):
                out.append(f"{rel}:{node.lineno}: {text!r}")
            continue
        ident = (getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "arg", None)
                 or (node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else None))
        if isinstance(ident, str) and any(w in ident.lower() for w in words):
            out.append(f"{rel}:{node.lineno}: {ident}")
    return out


def test_core_commands_and_checks_name_no_family():
    """A new family is its package and a registry line: no other module knows
    a family by name (docs/architecture.md, "Adding a family")."""
    packages = _family_packages()
    assert packages >= {"timeline.cuda", "timeline.gpu", "timeline.kctx"}, packages
    names = {f.name for f in registry.FAMILY_LIST} - _core_family_names()
    offenders, seen = [], 0
    for root, dirs, files in os.walk(os.path.join(REPO, "timeline")):
        rel_root = os.path.relpath(root, REPO)
        if rel_root.replace(os.sep, ".") in packages:
            dirs.clear()  # a family's own package
            continue
        for name in files:
            rel = os.path.join(rel_root, name)
            if not name.endswith(".py") or rel == os.path.join("timeline", "registry.py") or (rel, "") in ALLOWED \
                    or rel.startswith(ALLOWED_DIRS):
                continue
            seen += 1
            offenders += _named_families(os.path.join(root, name), rel, names, packages)
    assert seen > 40 and not offenders, "\n".join(offenders)


def test_the_family_name_check_can_fail(tmp_path):
    """What the old code did is caught: a family's options by name, its ring
    constant, an import of its package, a string naming its kind; prose is not."""
    bad = tmp_path / "bad.py"
    bad.write_text("from timeline.kctx import block_records\n"
                   "def preflight(cfg):\n"
                   "    'cuda in a docstring is prose'\n"
                   "    cuda_opts = cfg.options.get('counters')\n"
                   "    x = block_records.RING_BLOCK\n"
                   "    return 'nvtx:' if x else 'a sentence about CUDA is prose'\n")
    found = _named_families(str(bad), "bad.py", {"counters", "block", "cuda"}, {"timeline.kctx"})
    text = "\n".join(found)
    assert "imports timeline.kctx" in text and "cuda_opts" in text and "'counters'" in text, text
    assert "RING_BLOCK" in text and "'nvtx:'" in text and "prose" not in text, text
