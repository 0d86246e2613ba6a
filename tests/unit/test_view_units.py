"""The command pid the viewer reads from a trace. The viewer served and opened in a
browser: tests/system/test_view.py.
"""
from __future__ import annotations

import os

from helpers import REPO

SAMPLE = os.path.join(REPO, "sample_traces", "train_cpu.pftrace")


def test_command_pid_read_from_the_last_packet_only(tmp_path):
    """The pid the viewer pins comes from a whole timeline trace; anything else
    (another producer's trace, a cut one, garbage, JSON) gives none."""
    from rawlog_factory import scenario
    from timeline.converters import convert
    from timeline.viewer import command_pid

    def pid_of(path) -> int | None:
        fd = os.open(path, os.O_RDONLY)
        try:
            return command_pid(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)

    raw = scenario(tmp_path / "s.tlraw")
    convert(raw, str(tmp_path / "s.pftrace"))
    convert(raw, str(tmp_path / "s.json"))
    assert pid_of(tmp_path / "s.pftrace") == 1000  # the launched process of the scenario
    data = (tmp_path / "s.pftrace").read_bytes()
    (tmp_path / "cut.pftrace").write_bytes(data[:-3])
    (tmp_path / "noise.pftrace").write_bytes(bytes(range(256)) * 40 + b"\x0a\x05\x2a\x03\x12\x01\x0a")
    for name in ("cut.pftrace", "noise.pftrace", "s.json"):
        assert pid_of(tmp_path / name) is None, name
    assert pid_of(os.path.join(REPO, "docs", "gpu-validation", "gpu-cnn.pftrace")) is None  # from before the key
    assert pid_of(os.path.join(REPO, "sample_traces", "train_gpu.pftrace")) is not None
    assert pid_of(SAMPLE) is not None
