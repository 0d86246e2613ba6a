"""Build the CO-RE BPF objects shipped with timeline.

    python -m timeline.bpf.build [--vmlinux /sys/kernel/btf/vmlinux] [--force]

Generates vmlinux.h from kernel BTF with bpftool, then compiles every
``*.bpf.c`` of the package with clang into ``*.bpf.o`` here (timeline/bpf/,
where the loader looks).  A family's ``.bpf.c`` sits beside its code and its
record header (timeline/cuda/cuda.bpf.c + records.h); the core families'
(proc, sched) are here.  Include path: this directory (vmlinux.h, events.h,
tracking.bpf.h), then the package root, so a header is found beside its
``.bpf.c`` or by its path under timeline/.  CO-RE relocations make the objects
portable to other BTF-enabled kernels, so users of a built package need
neither clang nor headers.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PKG = HERE.parent
MULTIARCH_INCLUDE = "/usr/include/x86_64-linux-gnu"


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if not path:
        sys.exit(f"build: {tool} not found (apt-get install clang llvm libbpf-dev bpftool)")
    return path


def gen_vmlinux_h(btf: str, out: Path) -> None:
    bpftool = _need("bpftool")
    with open(out, "wb") as f:
        subprocess.run([bpftool, "btf", "dump", "file", btf, "format", "c"], stdout=f, check=True)


def sources() -> list[Path]:
    """Every ``*.bpf.c`` under timeline/, by object name (one object per name)."""
    found = sorted(PKG.rglob("*.bpf.c"), key=lambda p: p.name)
    names = [p.name for p in found]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        sys.exit(f"build: two sources would build the same object: {', '.join(dup)}")
    return found


def compile_one(src: Path, force: bool) -> Path:
    obj = HERE / src.with_suffix(".o").name  # cuda/cuda.bpf.c -> bpf/cuda.bpf.o
    # every header of the package: a rebuild too many costs a second, one too few a stale layout
    deps = [src, *PKG.rglob("*.h")]
    if not force and obj.exists() and obj.stat().st_mtime >= max(d.stat().st_mtime for d in deps):
        return obj
    cmd = [
        _need("clang"), "-g", "-O2", "-target", "bpf", "-D__TARGET_ARCH_x86",
        "-Wall", "-Werror", "-I", str(HERE), "-I", str(PKG), "-c", str(src), "-o", str(obj),
    ]
    if os.path.isdir(MULTIARCH_INCLUDE):
        cmd[1:1] = ["-I", MULTIARCH_INCLUDE]
    subprocess.run(cmd, check=True)
    # Drop DWARF but keep .BTF/.BTF.ext, which CO-RE relocation needs.
    subprocess.run([_need("llvm-strip"), "-g", str(obj)], check=True)
    return obj


def build(vmlinux: str = "/sys/kernel/btf/vmlinux", force: bool = False) -> list[Path]:
    header = HERE / "vmlinux.h"
    if force or not header.exists():
        if not os.path.exists(vmlinux):
            sys.exit(f"build: {vmlinux} not found: the kernel needs CONFIG_DEBUG_INFO_BTF=y")
        gen_vmlinux_h(vmlinux, header)
    return [compile_one(src, force) for src in sources()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vmlinux", default="/sys/kernel/btf/vmlinux")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    for obj in build(args.vmlinux, args.force):
        print(f"built {obj.relative_to(HERE.parent.parent)}")
    from timeline.bpf import build_inject  # the CUDA injection library (family gpu), same step
    print(f"built {build_inject.build(args.force).relative_to(HERE.parent.parent)}")


if __name__ == "__main__":
    main()
