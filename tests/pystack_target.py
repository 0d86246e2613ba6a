"""Target of tests/test_pystack*.py: a known call chain outer() -> middle() ->
inner() whose innermost line calls cudaStreamSynchronize (the real libcudart,
through ctypes) or blocks reading a pipe.  Prints, as one JSON line, what the
test needs to check the recorded stacks: pid, thread id, this file's path and
the line of each call site (found by their marker comments, so editing this
file cannot make a test pass by accident).

    python pystack_target.py cuda LIBCUDART N   N synchronizations in inner()
    python pystack_target.py repeat LIBCUDART N N synchronizations in inner(), two from one line,
                                                two from another, and again (the i-th from
                                                INNER_SYNC_A when i // 2 is even, else INNER_SYNC_B)
    python pystack_target.py launch LIBCUDART N N cudaLaunchKernel calls in inner()
    python pystack_target.py pipe MS            inner() blocks MS ms reading a pipe
    python pystack_target.py park               prints first, then blocks in inner() until stdin closes
"""
import ctypes
import json
import os
import sys
import threading
import time

SYNC = LAUNCH = READ_END = None


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def line_of(marker, path=__file__):
    """The line of `path` (this file) that ends with `# MARKER`."""
    with open(path) as f:
        for i, text in enumerate(f, 1):
            if text.rstrip().endswith("# " + marker):
                return i
    raise LookupError(marker)


def inner(mode, n):
    for i in range(n):
        if mode == "cuda":
            SYNC(None)  # INNER_CUDA
        elif mode == "repeat":
            if i // 2 % 2 == 0:
                SYNC(None)  # INNER_SYNC_A
            else:
                SYNC(None)  # INNER_SYNC_B
        elif mode == "launch":
            LAUNCH(None, Dim3(1, 1, 1), Dim3(32, 1, 1), None, 0, None)  # INNER_LAUNCH
        else:
            os.read(READ_END, 1)  # INNER_PIPE


def middle(mode, n):
    inner(mode, n)  # MIDDLE


def outer(mode, n):
    middle(mode, n)  # OUTER


def info():
    return json.dumps({"pid": os.getpid(), "tid": threading.get_native_id(), "ident": threading.get_ident(),
                       "file": os.path.abspath(__file__),
                       "lines": {m: line_of(m) for m in ("INNER_CUDA", "INNER_SYNC_A", "INNER_SYNC_B", "INNER_LAUNCH", "INNER_PIPE", "MIDDLE", "OUTER", "MAIN",
                                                         "LINGER", "MODULE")}})


def main():
    global SYNC, LAUNCH, READ_END
    mode = sys.argv[1]
    if mode == "park":
        READ_END, n = sys.stdin.fileno(), 1
        time.sleep(float(os.environ.get("PYSTACK_TARGET_DELAY", "0")))
        print(info(), flush=True)
        mode = "pipe"
    elif mode in ("cuda", "repeat"):
        SYNC = ctypes.CDLL(sys.argv[2]).cudaStreamSynchronize
        SYNC.argtypes = [ctypes.c_void_p]
        n = int(sys.argv[3])
    elif mode == "launch":
        LAUNCH = ctypes.CDLL(sys.argv[2]).cudaLaunchKernel
        LAUNCH.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        n = int(sys.argv[3])
    elif mode == "pipe":
        READ_END, w = os.pipe()
        n = 1
    if sys.argv[1] != "park":  # a real job imports for a while first: the recorder finds its interpreter
        time.sleep(float(os.environ.get("PYSTACK_TARGET_DELAY", "0")))
    if sys.argv[1] == "pipe":
        threading.Timer(int(sys.argv[2]) / 1000, os.write, (w, b"x")).start()
    outer(mode, n)  # MAIN
    if sys.argv[1] != "park":
        # The recorder reads new code objects while the process lives: stay a
        # little, as any real job does after its last synchronization.
        time.sleep(float(os.environ.get("PYSTACK_TARGET_LINGER", "0.3")))  # LINGER
        print(info(), flush=True)


if __name__ == "__main__":
    main()  # MODULE
