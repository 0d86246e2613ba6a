"""Target of tests/system/test_pystack_shutdown.py: the main thread's last
Python line builds a large structure that only the interpreter's shutdown
frees, in C with no Python frame on the thread (a few hundred ms of CPU)."""
import json
import threading
import time

KEPT = [{"i": i} for i in range(3_000_000)]  # BUILD
print(json.dumps({"tid": threading.get_native_id(), "cpu_s": time.thread_time()}), flush=True)
