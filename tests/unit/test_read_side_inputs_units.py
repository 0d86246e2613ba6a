"""ELF reads of a mapped file are bounded and never wait (issue 20). Inputs read as the
user in sudo mode: tests/system/test_read_side_inputs.py.
"""
from __future__ import annotations

import os

import pytest


def test_elf_reads_are_bounded_and_never_wait(tmp_path, monkeypatch):
    from timeline.cuda import symbols
    from timeline.safe_input import NotRegularFile

    fifo = str(tmp_path / "libcudart.so.12")
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile):  # the recorder's library scan: refused at once, not waited on
        symbols.ElfSymbols(fifo)
    assert symbols.ElfSymbols("/bin/true").segments  # an ELF file within the budget
    monkeypatch.setattr(symbols, "ELF_READ_BUDGET", 4096)
    with pytest.raises(Exception, match="read more than 4096 bytes"):  # (pyelftools wraps InputTooLarge)
        symbols.ElfSymbols("/bin/true")
