#!/bin/bash
# Assemble .devcarry/ (gitignored; name it in the device tool's `carry`) with what the GPU
# machine's image lacks for bench/gpu_truth.sh: cp312 wheels (orjson, perfetto, protobuf,
# pyelftools), Debian's libbpf.so.1 (+ libelf as a fallback), the built BPF objects and
# injection library, and NVIDIA's CUDA 12 libcudart/libcupti for the CUDA 12 check.
#   bash scripts/device_carry.sh [REPO_WITH_BUILT_OBJECTS]   (default: this checkout)
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-$PWD}
PIP=${PIP:-/work/main/.venv/bin/pip}
NV=${NV:-/work/main/.venv/lib/python3.11/site-packages/nvidia}
D=.devcarry
rm -rf "$D" && mkdir -p "$D"/wheels "$D"/lib/extra "$D"/objs "$D"/cu12/nvidia/cuda_runtime/lib "$D"/cu12/nvidia/cuda_cupti/lib
"$PIP" download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --no-deps -d "$D"/wheels orjson perfetto 'protobuf>=6.31.1' pyelftools
cp -L /usr/lib/x86_64-linux-gnu/libbpf.so.1 "$D"/lib/libbpf.so.1
cp -L /usr/lib/x86_64-linux-gnu/libelf.so.1 "$D"/lib/extra/libelf.so.1
cp "$SRC"/timeline/bpf/*.bpf.o "$SRC"/timeline/gpu/libtimeline_inject.so "$D"/objs/
cp "$NV"/cuda_runtime/lib/libcudart.so.12 "$D"/cu12/nvidia/cuda_runtime/lib/
cp "$NV"/cuda_cupti/lib/libcupti.so.12 "$D"/cu12/nvidia/cuda_cupti/lib/
ls -l "$D"/wheels
du -sh "$D"
