#!/usr/bin/env bash
# Installs everything timeline needs on Debian/Ubuntu and builds the BPF objects.
# Idempotent: skips what is already there. Needs root (apt, and later eBPF).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

need_apt=()
for pkg in clang llvm libbpf-dev bpftool libbpf1 util-linux chromium chromium-driver; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
    echo "setup: apt-get install ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

echo "setup: pip install timeline and its test extras"
"$PY" -m pip install -q --disable-pip-version-check -e '.[test]' 2>&1 | grep -v -e '^WARNING: Running pip as' -e 'is ignored: it is neither' || true
# The bundled example trains with PyTorch (CPU build is enough).
"$PY" -c 'import torch' 2>/dev/null || "$PY" -m pip install -q --disable-pip-version-check 'torch==2.13.0' 2>&1 \
    | grep -v -e '^WARNING: Running pip as' -e 'is ignored: it is neither' || true

echo "setup: building BPF objects"
"$PY" -m timeline.bpf.build
