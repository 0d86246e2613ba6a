"""A small stand-in training loop for tests/system/test_pystack_view.py and the
screenshots in docs/python-stacks.md: Python work on the CPU (forward ->
augment), a CUDA synchronization per step (the real libcudart's
cudaStreamSynchronize through ctypes, as loss.item() would make), and a
loader thread whose batches the main thread waits for.

    python pystack_demo.py LIBCUDART [STEPS]
"""
import ctypes
import queue
import sys
import threading
import time

SYNC = ctypes.CDLL(sys.argv[1]).cudaStreamSynchronize
SYNC.argtypes = [ctypes.c_void_p]
BATCHES = queue.Queue(maxsize=2)


def loader():
    while True:
        time.sleep(0.03)  # reading a batch
        BATCHES.put(object())


def busy(x, seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        x = (x * 31 + 7) % 1000003
    return x


def augment(x):
    return busy(x, 0.01)


def forward(x):
    x = busy(x, 0.02)
    return augment(x)


def train_step(x):
    y = forward(x)
    SYNC(None)  # loss.item()
    return y


def main():
    threading.Thread(target=loader, daemon=True, name="loader").start()
    time.sleep(0.3)  # imports, model set-up
    x = 1
    for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 40):
        BATCHES.get()  # for batch in loader
        x = train_step(x)
    time.sleep(0.3)


if __name__ == "__main__":
    main()
