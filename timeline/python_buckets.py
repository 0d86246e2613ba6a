"""The one-frame stacks of Python samples taken without a Python stack.

The pystack converter keeps such a sample (it still took the thread's CPU)
as a one-frame stack with no file, named for why it has no stack
(docs/python-stacks.md), so a thread's samples add up to its CPU time.
Readers that rank functions count them in the shares but list them apart,
with the reason: timeline mcp's samples query, timeline diff.  The names
live here, outside the family's package, because those readers are core
modules, which name no family (tests/unit/test_family_registry.py);
python_hotspots.sql spells them in SQL (tests/unit/test_pystack_buckets.py
checks it agrees)."""
from __future__ import annotations

from typing import Optional

NO_FRAME = "<no Python frame>"            # a thread state with no frame on it: start-up, shutdown, C entered frameless
UNREADABLE = "<Python stack unreadable>"  # the walk could not read the interpreter's memory
LOST = "<Python stack lost>"              # taken, but its stack record never reached the log (ring full)

# bucket -> why its samples have no stack
WITHOUT_STACK = {
    NO_FRAME: "the thread held no Python frame (interpreter start-up or shutdown, or C code entered without one)",
    UNREADABLE: "the recorder could not read the Python stack",
    LOST: "the stack was taken, but its record was lost (the recorder's stack ring stayed full)",
}


def without_stack(function: str, file: str = "") -> Optional[str]:
    """Why a frame is a bucket (no stack), or None for a function of the program:
    a bucket's frame has no file, so a user's function of that name is not one."""
    return None if file else WITHOUT_STACK.get(function)
