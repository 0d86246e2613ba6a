"""`timeline --version` and shell completion (click's), as the README documents them."""
import os
import subprocess
import sys
from importlib import metadata

import pytest

from helpers import timeline_cmd

import timeline

# What the `timeline` console script runs (it may belong to another checkout in a
# developer's environment; the installed script itself is run by test_wheel.py)
TIMELINE = [sys.executable, "-c", "from timeline.cli import main; main(prog_name='timeline')"]


def test_version_is_the_package_metadata():
    cp = timeline_cmd("--version")
    assert cp.returncode == 0
    assert cp.stdout.strip() == f"timeline, version {metadata.version('timeline')}"
    assert metadata.version("timeline") == timeline.__version__  # pyproject takes it from there


@pytest.mark.parametrize("shell,marker", [("bash", "complete -o nosort -F"), ("zsh", "compdef"),
                                          ("fish", "complete --no-files --command timeline")])
def test_completion_script(shell, marker):
    cp = subprocess.run(TIMELINE, env=dict(os.environ, _TIMELINE_COMPLETE=f"{shell}_source"),
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and marker in cp.stdout


def test_completion_completes_commands():
    env = dict(os.environ, _TIMELINE_COMPLETE="bash_complete", COMP_WORDS="timeline do", COMP_CWORD="1")
    cp = subprocess.run(TIMELINE, env=env, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "plain,doctor" in cp.stdout.splitlines()
