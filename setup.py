"""Build hook: compile timeline's CO-RE eBPF objects (and anything else the
project's native build makes) into the package before it is copied into a
wheel, so an installed timeline needs neither clang nor kernel headers.

Metadata lives in pyproject.toml; this file only adds the build step.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

from setuptools.command.bdist_wheel import bdist_wheel  # setuptools >= 70.1

HERE = os.path.dirname(os.path.abspath(__file__))
# The project's native build entry points, run as `python -m MODULE`. Whatever
# they leave under timeline/ and the package data globs match ships.
NATIVE_BUILDS = ["timeline.bpf.build"]
TOOLS = ("clang", "llvm-strip", "bpftool")
APT_HINT = "apt-get install clang llvm bpftool libbpf-dev (Debian/Ubuntu)"


class BuildNativeError(SystemExit):
    pass


def build_native():
    missing = [t for t in TOOLS if not shutil.which(t)]
    if not os.path.exists("/usr/include/bpf/bpf_helpers.h"):
        missing.append("libbpf headers")
    if missing:
        raise BuildNativeError(f"timeline: building its eBPF objects needs {', '.join(missing)}: {APT_HINT}")
    for mod in NATIVE_BUILDS:
        # A subprocess with the tree on sys.path: the build modules use the
        # standard library only, so this works in pip's isolated build env.
        env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
        r = subprocess.run([sys.executable, "-m", mod], cwd=HERE, env=env)
        if r.returncode:
            raise BuildNativeError(f"timeline: `python -m {mod}` failed (exit {r.returncode}); see its output above")


class BuildPyWithNative(build_py):
    def run(self):
        build_native()
        super().run()


class PlatformWheel(bdist_wheel):
    """The wheel holds BPF objects for this architecture (and native
    libraries), not Python extensions: py3-none-<platform>."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


class NativeDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithNative, "bdist_wheel": PlatformWheel}, distclass=NativeDistribution)
