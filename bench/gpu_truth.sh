#!/bin/bash
# The GPU-lease entry point of issue 25 (docs/gpu-validation.md): `bash bench/gpu_truth.sh`,
# with .devcarry/ carried (scripts/device_carry.sh).  Results go to $OUT as they are made.
#   DRY_RUN=1 OUT=/tmp/gt-out bash bench/gpu_truth.sh    (no GPU: stand-ins, torch on the CPU)
set -u
cd "$(dirname "$0")/.."
START=$(date +%s)
BUDGET=${BUDGET:-500}                      # seconds from here to the last phase's end
OUT=${OUT:?OUT must name the output folder}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
C=$PWD/.devcarry
DEPS=${DEPS:-/tmp/tldeps}
exec > >(tee -a "$OUT/log.txt") 2>&1
echo "== gpu_truth.sh $(date -u) on $(uname -r), $(nproc) cores, python $($PY -V 2>&1)"
if [ -d "$C/wheels" ]; then
    rm -rf "$DEPS"
    if [ -n "${DRY_RUN:-}" ]; then   # cp312 wheels, another python here: check they install, do not use them
        $PY -m pip install -q --no-index --no-deps --target "$DEPS" --python-version 3.12 --only-binary=:all: \
            --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 "$C"/wheels/*.whl \
            || echo "!! wheel install failed"
    else
        $PY -m pip install -q --no-index --no-deps --target "$DEPS" "$C"/wheels/*.whl || {
            echo "!! pip failed: unzipping the wheels instead (a venv without pip)"
            $PY -c "import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]" \
                "$DEPS" "$C"/wheels/*.whl; }
    fi
    ls "$DEPS"
else
    echo "!! no .devcarry/wheels: name .devcarry in the device tool's carry (scripts/device_carry.sh)"
fi
if [ -d "$C/objs" ] && [ -z "${DRY_RUN:-}" ]; then
    cp "$C"/objs/*.bpf.o timeline/bpf/ && cp "$C"/objs/libtimeline_inject.so timeline/gpu/
fi
LIBS="$C/lib"
ldconfig -p 2>/dev/null | grep -q 'libelf.so.1 ' || LIBS="$LIBS:$C/lib/extra"
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="${DRY_RUN:+$PWD}${DRY_RUN:-$DEPS:$PWD}" GT_LOG_TEED=1
export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824
nvidia-smi || echo "(no nvidia-smi)"
$PY -c "import orjson, perfetto, google.protobuf, elftools; print('deps ok: protobuf', google.protobuf.__version__)"
timeout 60 $PY -m timeline.cli doctor || echo "!! doctor exit $?"
DEADLINE=$((START + BUDGET))
$PY bench/gpu_truth.py run --out "$OUT" --deadline "$DEADLINE" ${DRY_RUN:+--dry-run} ${GT_ARGS:-}
echo "== gpu_truth.sh done in $(( $(date +%s) - START ))s"
ls -la "$OUT"
