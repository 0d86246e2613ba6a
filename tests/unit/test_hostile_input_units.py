"""Odd bytes made printable (issue 16). Recordings of a hostile target:
tests/system/test_hostile_input.py.
"""
from __future__ import annotations

from timeline.terminal import printable


def test_printable_escapes_controls_and_undecodable_bytes():
    assert printable("a\x1b]0;X\x07b") == "a\\x1b]0;X\\x07b"
    assert printable(b"n\xffm".decode("utf-8", "surrogateescape")) == "n\\xffm"
    assert printable("l\nr\t\x9b\u202e") == "l\\nr\\t\\x9b\\u202e"
    assert printable("plain é 名前") == "plain é 名前"
