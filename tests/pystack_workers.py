"""Target of tests/system/test_pystack_processes.py: Python stacks in threads, forked
and spawned worker processes, deep recursion and exec'd code.  Each mode
blocks in known functions and prints one JSON line with what the test needs.

    python pystack_workers.py threads      3 threads, thread k blocks in blocked_in_thread_k()
    python pystack_workers.py fork|spawn   a multiprocessing worker blocks in worker_main() -> worker_wait()
    python pystack_workers.py deep         recursion 200 deep, then blocks
    python pystack_workers.py exec N SAME  N exec'd code objects, each blocks once, then freed; SAME=1:
                                           all named gen() (only the file name differs); SAME=2: copies
                                           of one gen() with code.replace(co_filename=...), each at the
                                           address the last one was freed from
    python pystack_workers.py spin S       the main thread spins S s of CPU in spin_outer() -> spin_middle()
                                           -> spin_inner(), a second thread in side_spin()
"""
import json
import multiprocessing as mp
import os
import sys
import threading
import time
import types

WAIT_S = 0.05


def block(seconds=WAIT_S):
    time.sleep(seconds)  # BLOCK


def blocked_in_thread_0(ids):
    ids[0] = threading.get_native_id()
    block(0.3)


def blocked_in_thread_1(ids):
    ids[1] = threading.get_native_id()
    block(0.3)


def blocked_in_thread_2(ids):
    ids[2] = threading.get_native_id()
    block(0.3)


def worker_wait():
    block(0.3)


def worker_main(q):
    q.put(os.getpid())
    worker_wait()


def recurse(n):
    if n:
        return recurse(n - 1)
    block(0.2)


def spin_inner(cpu_s):
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:  # SPIN
        pass
    return time.thread_time()


def spin_middle(cpu_s):
    return spin_inner(cpu_s)


def spin_outer(cpu_s):
    return spin_middle(cpu_s)


def side_spin(cpu_s, out):
    out["side_tid"] = threading.get_native_id()
    t0 = time.thread_time()
    end = t0 + cpu_s
    while time.thread_time() < end:  # SIDE
        pass
    out["side_cpu_s"] = time.thread_time() - t0


def main():
    mode = sys.argv[1]
    time.sleep(0.2)  # a real job imports for a while: the recorder finds the interpreter
    out = {"pid": os.getpid(), "tid": threading.get_native_id()}
    if mode == "threads":
        ids = {}
        threads = [threading.Thread(target=f, args=(ids,), name=f"t{i}")
                   for i, f in enumerate((blocked_in_thread_0, blocked_in_thread_1, blocked_in_thread_2))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out["threads"] = {f"blocked_in_thread_{k}": v for k, v in ids.items()}
    elif mode in ("fork", "spawn"):
        ctx = mp.get_context(mode)
        q = ctx.Queue()
        p = ctx.Process(target=worker_main, args=(q,))
        p.start()
        out["worker"] = q.get()
        p.join()
    elif mode == "deep":
        recurse(200)
    elif mode == "exec":
        n, same = int(sys.argv[2]), sys.argv[3]
        ns = {"block": block}
        exec(compile("def gen():\n    block(0.002)\n", "template.py", "exec"), ns)
        template = ns["gen"]
        addresses = set()
        calls = []  # each call's [start, end], on the trace's clock: its waits lie within
        now = lambda: time.clock_gettime_ns(time.CLOCK_BOOTTIME)  # noqa: E731
        for i in range(n):
            if same == "2":
                code = template.__code__.replace(co_filename=f"generated_{i}.py")
                fn = types.FunctionType(code, ns)
                addresses.add(id(code))
                t0 = now()
                fn()
                calls.append([t0, now()])
                del fn, code  # freed here: the next copy takes its address
                continue
            name = "gen" if same == "1" else f"gen_{i}"
            ns = {"block": block}
            exec(compile(f"def {name}():\n    block(0.002)\n", f"generated_{i}.py", "exec"), ns)
            t0 = now()
            ns[name]()
            calls.append([t0, now()])
            del ns  # the code object is freed here: the next one may take its address
        out["code_addresses"] = len(addresses)
        out["calls"] = calls
    elif mode == "spin":
        cpu_s = float(sys.argv[2])
        side = threading.Thread(target=side_spin, args=(cpu_s, out))
        side.start()
        t0 = time.thread_time()
        out["main_cpu_s"] = spin_outer(cpu_s) - t0
        side.join()
    time.sleep(0.3)  # the recorder reads new code objects while the process lives
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
