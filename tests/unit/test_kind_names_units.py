"""Record kind names do not depend on which modules were imported. Each family
recorded alone: tests/system/test_kind_names.py.
"""
import subprocess
import sys

from timeline import registry


def test_names_do_not_depend_on_imports():
    # A fresh interpreter that imports only the recorder sees every family's names.
    code = ("from timeline import recorder, registry; "
            "assert recorder.KIND_NAMES == registry.KIND_NAMES; print(len(recorder.KIND_NAMES))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out) == len(registry.KIND_NAMES) == sum(len(r.kinds) for r in registry.RINGS.values())
