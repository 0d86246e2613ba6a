"""The per-version CPython layouts of the pystack family, checked against the
interpreters on this machine (absent ones skipped), without BPF:

- the walk of pystack.bpf.c, done in Python over process_vm_readv
  (timeline/pystack/walk.py) with the table's offsets, finds a target parked
  at a known line and names its stack exactly;
- 3.13's own _Py_DebugOffsets agree with the table;
- the line table decoders agree with co_lines() of each version for every
  code object of a few standard modules;
- the BPF structs the plugin writes and reads match their dtypes (BTF).
"""
import json
import os
import subprocess

import pytest

from timeline import bpf_session
from timeline.btf_layout import Btf
from timeline.pystack import interpreter, layouts, walk
from timeline.pystack import records as R
from timeline.pystack.memory import ProcessMemory
from timeline.pystack.symbolize import (NOT_STARTED, code_check, line_at, ranges_310, ranges_311,
                                         ranges_311_many)
from helpers import REPO
from pystack_pythons import OLD, PYTHONS, params

TARGET = os.path.join(REPO, "tests", "pystack_target.py")


@pytest.fixture(scope="module", params=params())
def parked(request):
    """A target blocked in inner() (reading its stdin), and its interpreter as found."""
    p = subprocess.Popen([PYTHONS[request.param], TARGET, "park"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        info = json.loads(p.stdout.readline())
        found = interpreter.Finder().find(p.pid, interpreter.read_maps(p.pid))
        yield request.param, info, found
    finally:
        p.stdin.close()
        p.wait(timeout=10)


def expected(info):
    f, ln = info["file"], info["lines"]
    return [("inner", f, ln["INNER_PIPE"]), ("middle", f, ln["MIDDLE"]), ("outer", f, ln["OUTER"]),
            ("main", f, ln["MAIN"]), ("<module>", f, ln["MODULE"])]


def test_interpreter_found_with_its_version(parked):
    name, info, found = parked
    out = subprocess.run([PYTHONS[name], "-c", "import sys; print(*sys.version_info[:3])"], capture_output=True,
                         text=True, check=True).stdout.split()
    want = tuple(int(x) for x in out)
    if found.version[:2] == (3, 10):  # no Py_Version before 3.11: told by the file name
        assert found.version[:2] == want[:2]
    else:
        assert found.version == want
    assert found.layout.minor == want[1]
    assert found.layout.debug_offsets == (want[1] >= 13)
    assert ("libpython" in os.path.basename(found.path)) == name.startswith("pyenv")


def test_code_dealloc_found_through_the_type(parked):
    """PyCode_Type.tp_dealloc, read from the process, is code_dealloc: where the
    file still has its .symtab (pyenv), the symbol agrees; stripped files
    (Debian's) have it all the same."""
    name, _, found = parked
    assert found.code_free is not None
    from elftools.elf.elffile import ELFFile
    with open(found.path, "rb") as f:
        elf = ELFFile(f)
        symtab = interpreter._symbols(elf, ("code_dealloc",), ".symtab")
        if name.startswith("pyenv"):
            seg = next(s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD" and s["p_flags"] & 1
                       and s["p_vaddr"] <= symtab["code_dealloc"] < s["p_vaddr"] + s["p_filesz"])
            assert found.code_free == symtab["code_dealloc"] - seg["p_vaddr"] + seg["p_offset"]
        else:
            assert not symtab


def test_walk_names_the_parked_stack(parked):
    _, info, found = parked
    # the BPF walk matches tstate->thread_id (pthread_self()) against the thread's fs base
    assert walk.stack(found, thread_id=info["ident"]) == expected(info)
    if found.layout.ts_native_thread_id is not None:
        assert walk.stack(found, native_id=info["tid"]) == expected(info)
    assert walk.stack(found, thread_id=12345) is None


def test_checksum_tells_code_objects_apart(parked):
    """Every frame's checksum is stable, and differs between the parked stack's functions."""
    _, info, found = parked
    mem = ProcessMemory(found.pid)
    ts = walk.find_thread(mem, found, thread_id=info["ident"])
    frames = walk.frames(mem, found, ts)
    again = walk.frames(mem, found, ts)
    assert frames == again
    assert len({c for _, _, c in frames}) == len(frames)
    assert all(instr != NOT_STARTED for _, instr, _ in frames)


def test_debug_offsets_agree_with_the_table(parked):
    _, _, found = parked
    if found.layout.minor < 13:
        pytest.skip("_Py_DebugOffsets are 3.13+")
    table = layouts.TABLE[found.layout.minor]
    for field in ("rt_interp_head", "interp_next", "interp_threads", "ts_next", "ts_thread_id", "ts_frame",
                  "fr_code", "fr_previous", "fr_instr", "fr_owner", "co_firstlineno", "co_filename", "co_name",
                  "co_qualname", "co_linetable", "co_code", "ascii_size"):
        assert getattr(found.layout, field) == getattr(table, field), field
    assert found.layout.co_version == table.co_version


DUMP = """
import json, sys, importlib
out = []
def walk(co):
    out.append([co.co_linetable.hex(), co.co_firstlineno, [list(r) for r in co.co_lines()]])
    for c in co.co_consts:
        if hasattr(c, "co_lines"):
            walk(c)
for name in ("json.decoder", "argparse", "asyncio.base_events", "dataclasses"):
    mod = importlib.import_module(name)
    walk(compile(open(mod.__file__).read(), mod.__file__, "exec"))
print(json.dumps(out))
"""


@pytest.mark.parametrize("name", params())
def test_line_tables_decode_like_co_lines(name):
    minor = int(name.rsplit(".", 1)[1])
    codes = json.loads(subprocess.run([PYTHONS[name], "-c", DUMP], capture_output=True, text=True,
                                      check=True).stdout)
    if minor == 10:
        decoded = [ranges_310(bytes.fromhex(table), first) for table, first, _ in codes]
    else:  # all tables in one batch (as the recorder decodes them), with an empty and a damaged one among them
        tables = [bytes.fromhex(table) for table, _, _ in codes]
        firsts = [first for _, first, _ in codes]
        batch = ranges_311_many(tables[:5] + [b"", b"\x05\x01"] + tables[5:], firsts[:5] + [1, 1] + firsts[5:])
        assert batch[5] == batch[6] == ([], [], [])
        decoded = batch[:5] + batch[7:]
        assert [ranges_311(t, f) for t, f in zip(tables[:50], firsts[:50])] == decoded[:50]
    checked = 0
    for (table, first, lines), ranges in zip(codes, decoded, strict=True):
        for start, end, line in lines:
            for off in range(start, end, 2):
                got = line_at(ranges, off, first)
                assert got == (first if line is None else line), (off, table)
                checked += 1
    assert checked > 10000


def test_unsupported_and_non_python():
    if not OLD:
        pytest.skip("no CPython older than 3.10 here")
    p = subprocess.Popen([OLD[-1], "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        import time
        time.sleep(0.3)
        with pytest.raises(interpreter.Unsupported, match=r"CPython 3\.9 is not supported \(3\.10 to 3\.13 are\)"):
            interpreter.Finder().find(p.pid, interpreter.read_maps(p.pid))
    finally:
        p.stdin.close()
        p.wait(timeout=10)
    with pytest.raises(interpreter.NotPython):
        interpreter.Finder().find(os.getppid(), interpreter.read_maps(os.getppid()) or [])


def test_code_check_is_32_bit_and_sensitive():
    a = code_check(10, 1, 0x7F00_0000_1000, 0x7F00_0000_2000)
    assert 0 <= a < 1 << 32
    assert a != code_check(11, 1, 0x7F00_0000_1000, 0x7F00_0000_2000)
    assert a != code_check(10, 2, 0x7F00_0000_1000, 0x7F00_0000_2000)
    assert a != code_check(10, 5 << 32, 0x7F00_0000_1000, 0x7F00_0000_2000)  # the hash's high half counts


def test_bpf_config_fits_the_window():
    for lay in layouts.TABLE.values():
        raw = lay.bpf_config(0x1234)
        assert len(raw) == R.PY_PROC.itemsize
    import dataclasses
    bad = dataclasses.replace(layouts.TABLE[12], fr_owner=200)
    with pytest.raises(ValueError, match="window"):
        bad.bpf_config(0)
    # the thread state's fields the walk reads at once (BPF: ts_window) must span TL_PY_TSWIN at most
    far = dataclasses.replace(layouts.TABLE[12], ts_datastack=layouts.TABLE[12].ts_frame + R.PY_TSWIN)
    with pytest.raises(ValueError, match="thread state"):
        far.bpf_config(0)


@pytest.mark.parametrize("cname,dtype", [("tl_py_proc", R.PY_PROC), ("tl_py_stack", R.PY_STACK),
                                         ("tl_py_frame", R.PY_FRAME)])
def test_structs_match_btf(cname, dtype):
    size, members = Btf.from_object(bpf_session.object_path("pystack.bpf.o")).struct_layout(cname)
    assert size == dtype.itemsize
    assert list(members) == list(dtype.names)
    for name, (off, sz) in members.items():
        assert (dtype.fields[name][1], dtype.fields[name][0].itemsize) == (off, sz), name
