"""Stand-in CUDA driver/runtime and NCCL libraries for the tests (no GPU needed).

The C sources here export the real symbol names with the real signatures;
`build(dirpath)` compiles them with the system C compiler at test time.
They are stand-ins: they succeed without doing anything on a GPU.
"""
from __future__ import annotations

import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
# output file -> (source, extra flags)
LIBS = {
    "libcuda.so.1": ("cuda_driver.c", ["-Wl,-soname,libcuda.so.1", "-ldl"]),
    "libcudart.so.12": ("cuda_runtime.c", ["-Wl,-soname,libcudart.so.12", "-L{dir}", "-l:libcuda.so.1",
                                           "-Wl,-rpath,$ORIGIN"]),
    "libnccl.so.2": ("nccl.c", ["-Wl,-soname,libnccl.so.2"]),
    "libkernels.so": ("kernels.c", []),
    "libkernels_stripped.so": ("kernels.c", ["-s"]),
}


def build(dirpath: str) -> dict[str, str]:
    """Compile every stand-in into dirpath; return {file name: path}."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("the CUDA tests need a C compiler (cc) to build their stand-in libraries")
    os.makedirs(dirpath, exist_ok=True)
    out = {}
    for name, (src, flags) in LIBS.items():  # in order: the runtime links against the driver
        path = os.path.join(dirpath, name)
        # -O0 and frame pointers: every function starts with `push %rbp`, like NVIDIA's
        cmd = [cc, "-O0", "-fno-omit-frame-pointer", "-shared", "-fPIC", "-Wall", "-Werror", "-o", path,
               os.path.join(HERE, src)] + [f.format(dir=dirpath) for f in flags]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        out[name] = path
    return out


def build_gpu(dirpath: str) -> dict[str, str]:
    """The CUDA stand-ins plus a stand-in libcupti.so.12, an NVTX caller and a library with its own
    CUDA runtime (as cuBLAS), compiled
    against the same NVIDIA headers as timeline's injection library, and that library."""
    from timeline.bpf import build_inject

    out = build(dirpath)
    hdr = build_inject.find_headers()
    missing = [k for k in ("cupti12", "cuda12", "crt", "nvtx") if not hdr[k]]
    if missing:
        raise RuntimeError(f"CUDA headers missing ({', '.join(missing)}): {build_inject.INSTALL_HINT}")
    shim = os.path.join(dirpath, "shim")
    os.makedirs(shim, exist_ok=True)
    for sub, root in (("crt", hdr["crt"]), ("nvtx3", hdr["nvtx"])):
        if not os.path.lexists(os.path.join(shim, sub)):
            os.symlink(os.path.join(root, sub), os.path.join(shim, sub))
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    inc = ["-I", hdr["cupti12"], "-I", hdr["cuda12"], "-I", shim]
    for name, src, flags in (("libcupti.so.12", "cupti.c", ["-Wl,-soname,libcupti.so.12", "-ldl", "-lpthread"]),
                             ("libnvtx_caller.so", "nvtx_caller.c", ["-ldl"]),
                             ("liblaunch_loop.so", "launch_loop.c", ["-ldl", f"-L{dirpath}", "-l:libcudart.so.12",
                                                                     "-Wl,-rpath,$ORIGIN"]),
                             ("libstatic_runtime.so", "static_runtime.c", [f"-L{dirpath}", "-l:libcuda.so.1",
                                                                           "-Wl,-rpath,$ORIGIN"])):
        path = os.path.join(dirpath, name)
        subprocess.run([cc, "-O1", "-shared", "-fPIC", "-Wall", "-Werror", *inc, "-o", path,
                        os.path.join(HERE, src), *flags], check=True, capture_output=True, text=True)
        out[name] = path
    if hdr["cupti13"]:  # CUDA 13 record layouts, when their headers are here
        path = os.path.join(dirpath, "libcupti.so.13")
        subprocess.run([cc, "-O1", "-shared", "-fPIC", "-Wall", "-Werror", "-I", hdr["cupti13"], "-I", shim,
                        "-o", path, os.path.join(HERE, "cupti.c"), "-Wl,-soname,libcupti.so.13", "-ldl",
                        "-lpthread"], check=True, capture_output=True, text=True)
        out["libcupti.so.13"] = path
    out["libtimeline_inject.so"] = str(build_inject.build())
    return out
