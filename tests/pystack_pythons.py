"""The CPython interpreters on this machine the pystack tests run against.

Absent ones are skipped, never failed: images differ.
"""
from __future__ import annotations

import glob
import os

import pytest

# name -> interpreter path; pyenv's share a libpython3.X.so, Debian's python3.11 is static.
CANDIDATES = {
    **{f"pyenv-3.{m}": sorted(glob.glob(f"/root/.pyenv/versions/3.{m}.*/bin/python3.{m}")) for m in (10, 11, 12, 13)},
    "debian-3.11": ["/usr/bin/python3.11"],
}
PYTHONS = {name: paths[-1] for name, paths in CANDIDATES.items() if paths and os.access(paths[-1], os.X_OK)}
OLD = sorted(glob.glob("/root/.pyenv/versions/3.9.*/bin/python3.9"))  # a CPython too old for pystack


def params():
    """pytest params, one per interpreter name (skipped when absent)."""
    return [pytest.param(name, marks=() if name in PYTHONS else pytest.mark.skip(reason=f"{name} not installed"))
            for name in CANDIDATES]
