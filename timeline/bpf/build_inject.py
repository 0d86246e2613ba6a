"""Build the CUPTI/NVTX injection library shipped with timeline (family `gpu`).

    python -m timeline.bpf.build_inject [--force]     (also run by timeline.bpf.build)

Compiles timeline/gpu/inject/*.c into timeline/gpu/libtimeline_inject.so with
the system C compiler against NVIDIA's headers from PyPI wheels (or a CUDA
toolkit).  libcupti itself is not linked: the library dlopens the target's
own at run time.  Headers, by what provides them:
    cupti.h (CUPTI 12.8/12.9)   nvidia-cuda-cupti-cu12   nvidia/cuda_cupti/include
    cuda.h, builtin_types.h     nvidia-cuda-runtime-cu12 nvidia/cuda_runtime/include
    crt/host_defines.h          nvidia-cuda-crt          nvidia/cu13/include
    nvtx3/nvToolsExt.h          nvidia-nvtx-cu12         nvidia/nvtx/include
    cupti.h (CUPTI 13.0), opt.  nvidia-cuda-cupti + nvidia-cuda-runtime (13) nvidia/cu13/include
Without the CUDA 13 headers the library still builds and reports CUDA 13
processes as unsupported.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent
SRC = PKG / "gpu" / "inject"
OUT = PKG / "gpu" / "libtimeline_inject.so"
INSTALL_HINT = ("pip install nvidia-cuda-cupti-cu12 nvidia-cuda-runtime-cu12 nvidia-cuda-crt nvidia-nvtx-cu12 "
                "(or: pip install -e '.[test]')")
CFLAGS = ["-O2", "-g", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
          "-Wno-missing-field-initializers"]
V12 = range(26, 29)            # CUPTI API versions decoded with the 12.x layouts
V13 = range(130000, 130002)


def _roots() -> list[str]:
    """Include directories that may hold NVIDIA headers, most specific first."""
    sp = []
    for d in [*site.getsitepackages(), site.getusersitepackages(), *sys.path]:
        if d and os.path.isdir(os.path.join(d, "nvidia")) and d not in sp:
            sp.append(d)
    roots = [os.path.join(d, "nvidia", sub, "include") for d in sp
             for sub in ("cuda_cupti", "cuda_runtime", "cu13", "nvtx", "cuda_nvcc", "cuda_crt")]
    for env in ("TIMELINE_CUDA_INCLUDE", "CUDA_HOME", "CUDA_PATH"):
        v = os.environ.get(env)
        if v:
            roots.insert(0, v if env == "TIMELINE_CUDA_INCLUDE" else os.path.join(v, "include"))
    roots += sorted(glob.glob("/usr/local/cuda*/include"), reverse=True) + ["/usr/include"]
    return [r for r in roots if os.path.isdir(r)]


def cupti_version(include: str) -> int:
    try:
        text = Path(include, "cupti_version.h").read_text(errors="replace")
    except OSError:
        return 0
    m = re.search(r"#define\s+CUPTI_API_VERSION\s+(\d+)", text)
    return int(m.group(1)) if m else 0


def find_headers() -> dict[str, str | None]:
    roots = _roots()

    def first(pred):
        return next((r for r in roots if pred(r)), None)

    has = lambda r, *f: all(os.path.exists(os.path.join(r, x)) for x in f)  # noqa: E731
    return {
        "cupti12": first(lambda r: cupti_version(r) in V12),
        "cuda12": first(lambda r: has(r, "cuda.h", "builtin_types.h") and "cu13" not in r
                        and "cuda-13" not in r),
        "crt": first(lambda r: has(r, "crt/host_defines.h")),
        "nvtx": first(lambda r: has(r, "nvtx3/nvToolsExt.h", "nvtx3/nvtxDetail/nvtxTypes.h")),
        "cupti13": first(lambda r: cupti_version(r) in V13 and has(r, "cuda.h")),
    }


def _shim(tmp: str, hdr: dict) -> str:
    """An include dir holding only crt/ and nvtx3/, so neither drags in other headers of its tree."""
    d = os.path.join(tmp, "shim")
    os.makedirs(d)
    os.symlink(os.path.join(hdr["crt"], "crt"), os.path.join(d, "crt"))
    os.symlink(os.path.join(hdr["nvtx"], "nvtx3"), os.path.join(d, "nvtx3"))
    return d


def build(force: bool = False) -> Path | None:
    """Build the library; returns its path, or exits with one line naming what to install."""
    sources = sorted(SRC.glob("*.c")) + sorted(SRC.glob("*.h")) + [PKG / "gpu" / "records.h"]
    if not force and OUT.exists() and OUT.stat().st_mtime >= max(s.stat().st_mtime for s in sources):
        return OUT
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        sys.exit("build: no C compiler for the CUDA injection library (apt-get install gcc)")
    hdr = find_headers()
    missing = [k for k in ("cupti12", "cuda12", "crt", "nvtx") if not hdr[k]]
    if missing:
        sys.exit(f"build: CUDA headers not found for the injection library ({', '.join(missing)}): {INSTALL_HINT}")
    with tempfile.TemporaryDirectory(prefix="tl-inject-") as tmp:
        shim = _shim(tmp, hdr)
        inc12 = ["-I", hdr["cupti12"], "-I", hdr["cuda12"], "-I", shim]
        objs = []

        def cc_one(src: Path, flags: list[str], name: str) -> None:
            obj = os.path.join(tmp, name)
            r = subprocess.run([cc, *CFLAGS, *flags, "-c", str(src), "-o", obj], capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"build: compiling {src.name} failed:\n{r.stderr.strip()}")
            objs.append(obj)

        have13 = hdr["cupti13"] is not None
        for src in sorted(SRC.glob("*.c")):
            if src.name == "decode.c":
                cc_one(src, ["-DTL_CUPTI_GEN=12", *inc12], "decode12.o")
                if have13:
                    cc_one(src, ["-DTL_CUPTI_GEN=13", "-I", hdr["cupti13"], "-I", shim], "decode13.o")
            else:
                cc_one(src, [f"-DTL_HAVE_V13={int(have13)}", *inc12], src.stem + ".o")
        if not have13:  # the v13 decoder symbol must exist; it is never selected
            stub = Path(tmp, "decode13_absent.c")
            stub.write_text('#include "inject.h"\nint tl_decode_v13(const void *a, struct tl_gpu_record *o, '
                            'tl_intern_fn f) { (void)a; (void)o; (void)f; return 0; }\n')
            cc_one(stub, ["-I", str(SRC)], "decode13.o")
        tmp_out = os.path.join(tmp, OUT.name)
        r = subprocess.run([cc, "-shared", "-o", tmp_out, *objs, "-ldl", "-lpthread", "-Wl,--no-undefined",
                            "-Wl,-z,nodelete"], capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"build: linking {OUT.name} failed:\n{r.stderr.strip()}")
        os.replace(tmp_out, OUT)
    return OUT


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    out = build(args.force)
    print(f"built {out.relative_to(PKG.parent)}")


if __name__ == "__main__":
    main()
