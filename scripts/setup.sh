#!/usr/bin/env bash
# Installs everything timeline needs on Debian/Ubuntu into the project's
# virtual environment .venv and builds the BPF objects. Idempotent: skips what
# is already there. Needs root (apt, and later eBPF).
#
#   PYTHON=/path/to/python3   the interpreter the venv is made from (default: python3 on PATH,
#                             which under sudo is the distribution's /usr/bin/python3)
#   VENV=.venv                where the environment goes
#   TORCH_SPEC='torch==2.13.0'  the PyTorch the example trains with (CPU build is enough);
#   TORCH_INDEX=URL           e.g. https://download.pytorch.org/whl/cpu for the small CPU-only wheel
# Any failing step stops setup with its error.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
export PIP_ROOT_USER_ACTION=ignore  # root is expected here (sudo make)
say() { echo "setup: $*"; }
die() { echo "setup: error: $*" >&2; exit 1; }

command -v "$PY" >/dev/null || die "no $PY found: install Python >= 3.10 (Debian/Ubuntu: apt-get install python3 python3-venv)"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || die "$("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])') is too old: timeline needs Python >= 3.10 (set PYTHON=...)"

have() { dpkg -s "$1" >/dev/null 2>&1; }
# grep reads all of it (not -q): under pipefail an early exit of grep would
# make apt-cache die of SIGPIPE and the package look unavailable.
candidate() { apt-cache policy "$1" 2>/dev/null | grep 'Candidate: [^(]' >/dev/null; }
need=()
# iproute2, nftables: the net family's tests (two network namespaces, packet loss)
for pkg in clang llvm libbpf-dev libbpf1 util-linux iproute2 nftables; do
    have "$pkg" || need+=("$pkg")
done
# The command, not the package: Ubuntu before 25.04 has a bpftool wrapper in
# linux-tools-common that only works with linux-tools-$(uname -r).
bpftool version >/dev/null 2>&1 || need+=(bpftool)
# Debian/Ubuntu ship `venv` and `ensurepip` apart from python3 (python3-venv, or
# python3.X-venv for that exact version); a pyenv/conda Python has them.
"$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(VENV)
browser=()  # only for the viewer's headless-browser test
for pkg in chromium chromium-driver; do
    have "$pkg" || browser+=("$pkg")
done
if ((${#need[@]} + ${#browser[@]})); then
    command -v apt-get >/dev/null || die "missing ${need[*]} ${browser[*]} and this is not a Debian/Ubuntu system: install them by hand"
    apt-get update -qq
    install=()
    for pkg in "${need[@]}"; do
        if [[ $pkg == VENV ]]; then
            pkg=python$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv
            candidate "$pkg" || pkg=python3-venv
        elif [[ $pkg == bpftool ]] && ! candidate bpftool; then
            install+=(linux-tools-common)
            pkg=linux-tools-$(uname -r)
        fi
        install+=("$pkg")
    done
    for pkg in "${browser[@]}"; do
        if candidate "$pkg"; then
            install+=("$pkg")
        else
            say "$pkg is not packaged here (Ubuntu ships Chromium as a snap): the viewer's browser test will skip (and fail under CI=1)"
        fi
    done
    if ((${#install[@]})); then
        say "apt-get install ${install[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${install[@]}" >/dev/null
    fi
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    say "creating $VENV with $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
    "$PY" -m venv "$VENV"
fi
VPY=$VENV/bin/python
# An install is redone when the package's metadata or this script changed.
stamp=$VENV/.timeline-installed
if [[ ! -e $stamp || pyproject.toml -nt $stamp || setup.py -nt $stamp || scripts/setup.sh -nt $stamp ]]; then
    say "pip install -e .[test,mcp] into $VENV (also builds the BPF objects)"
    # pip reads its configuration (index, find-links) from /etc/pip.conf,
    # /etc/xdg/pip and ~/.config/pip, so a local index is used under sudo too.
    "$VPY" -m pip install -q --disable-pip-version-check --upgrade pip 'setuptools>=77'
    "$VPY" -m pip install -q --disable-pip-version-check -e '.[test,mcp]'
    if ! "$VPY" -c 'import torch' >/dev/null 2>&1; then
        say "pip install $TORCH_SPEC (for the bundled example)"
        "$VPY" -m pip install -q --disable-pip-version-check ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} "$TORCH_SPEC"
    fi
    touch "$stamp"
fi

say "building BPF objects"
"$VPY" -m timeline.bpf.build
say "ready: $VENV/bin/timeline ($("$VENV/bin/timeline" --version))"
