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
    "libcuda.so.1": ("cuda_driver.c", ["-Wl,-soname,libcuda.so.1"]),
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
    out = {}
    for name, (src, flags) in LIBS.items():  # in order: the runtime links against the driver
        path = os.path.join(dirpath, name)
        # -O0 and frame pointers: every function starts with `push %rbp`, like NVIDIA's
        cmd = [cc, "-O0", "-fno-omit-frame-pointer", "-shared", "-fPIC", "-Wall", "-Werror", "-o", path,
               os.path.join(HERE, src)] + [f.format(dir=dirpath) for f in flags]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        out[name] = path
    return out
