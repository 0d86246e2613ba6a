"""A bad `-o` template through the real command: one line. The templates:
tests/unit/test_output_template.py.
"""
from helpers import timeline_cmd


def test_cli_one_line_error():
    r = timeline_cmd("record", "-o", "t_%z.pftrace", "--", "true")
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "%z" in lines[0] and "Traceback" not in r.stderr
