"""Target of tests/system/test_pystack_checks.py: a stand-in training loop
whose main thread waits for a DataLoader-like worker process and
synchronizes once per step, each from a known line, so that input_stall and
sync_hotspots can name them.

The worker is a forked process named pt_data_worker (as torch names its
DataLoader workers) that writes a "batch" into a pipe every BATCH_S; the main
thread reads it in next_batch() (the stall), then calls the real libcudart's
cudaStreamSynchronize through ctypes in train_step() (no GPU: it returns an
error after the uprobes fired).  Prints one JSON line: pid, tid, this file's
path and the lines of the call sites (found by their marker comments).

    python pystack_stall.py LIBCUDART STEPS
"""
import ctypes
import json
import os
import sys
import threading
import time

from pystack_target import line_of  # (a sibling: this script's directory is on sys.path)

BATCH_S = 0.03
PR_SET_NAME = 15


def worker(w, steps):
    ctypes.CDLL(None).prctl(PR_SET_NAME, b"pt_data_worker", 0, 0, 0)
    for _ in range(steps):
        time.sleep(BATCH_S)  # reading and decoding samples
        os.write(w, b"b")


def next_batch(r):
    return os.read(r, 1)  # WAIT


def train_step(sync):
    sync(None)  # SYNC


def main():
    sync = ctypes.CDLL(sys.argv[1]).cudaStreamSynchronize
    sync.argtypes = [ctypes.c_void_p]
    steps = int(sys.argv[2])
    time.sleep(0.2)  # a real job imports for a while: the recorder finds the interpreter
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        worker(w, steps)
        os._exit(0)
    os.close(w)
    for _ in range(steps):
        next_batch(r)
        train_step(sync)
    os.waitpid(pid, 0)
    time.sleep(0.3)  # the recorder reads new code objects while the process lives
    print(json.dumps({"pid": os.getpid(), "tid": threading.get_native_id(), "file": os.path.abspath(__file__),
                      "lines": {m: line_of(m, __file__) for m in ("WAIT", "SYNC")}}), flush=True)


if __name__ == "__main__":
    main()
