"""A 2-rank job across two network namespaces, for the net family's tests and bench.

    net_job.py launch NS0 NS1 ADDR0 PORT STEPS MIB [gloo|socket]
        starts rank 0 in NS0 (listening on ADDR0:PORT) and rank 1 in NS1
        (`ip netns exec`), waits for both; exits non-zero if either failed.
    net_job.py rank RANK ADDR0 PORT STEPS MIB MODE
        one rank: STEPS all-reduces of a MIB MiB float32 tensor over gloo, or
        (socket) STEPS exchanges of MIB MiB each way over one TCP connection.
Prints 'step_s <mean seconds per step>' per rank.
"""
import os
import socket
import subprocess
import sys
import threading
import time


def exchange(sock, nbytes):
    buf = bytearray(nbytes)
    view = memoryview(buf)
    got = 0
    while got < nbytes:
        n = sock.recv_into(view[got:])
        if not n:
            raise SystemExit("peer closed")
        got += n


def run_socket(rank, addr, port, steps, nbytes):
    if rank == 0:
        srv = socket.create_server((addr, port))
        conn, _ = srv.accept()
    else:
        for _ in range(200):
            try:
                conn = socket.create_connection((addr, port))
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise SystemExit("could not connect")
    payload = b"x" * nbytes
    t0 = time.perf_counter()
    for _ in range(steps):
        # both send then receive, like a 2-rank all-reduce; a thread sends so neither blocks the other
        s = threading.Thread(target=conn.sendall, args=(payload,))
        s.start()
        exchange(conn, nbytes)
        s.join()
    return (time.perf_counter() - t0) / steps


def run_gloo(rank, addr, port, steps, nbytes):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=2)
    x = torch.ones(nbytes // 4)
    dist.all_reduce(x)  # warm-up: connections set up
    t0 = time.perf_counter()
    for _ in range(steps):
        dist.all_reduce(x)
    dt = (time.perf_counter() - t0) / steps
    dist.destroy_process_group()
    return dt


def main(argv):
    if argv[0] == "launch":
        ns0, ns1, addr, port, steps, mib = argv[1:7]
        mode = argv[7] if len(argv) > 7 else "gloo"
        procs = []
        for rank, ns in enumerate((ns0, ns1)):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2")
            env["GLOO_SOCKET_IFNAME"] = ns  # the veth end in each namespace is named after it
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, __file__, "rank", str(rank),
                                           addr, port, steps, mib, mode], env=env))
        return max(p.wait() for p in procs)
    rank, addr, port, steps, mib, mode = int(argv[1]), argv[2], int(argv[3]), int(argv[4]), float(argv[5]), argv[6]
    nbytes = int(mib * (1 << 20))
    dt = (run_gloo if mode == "gloo" else run_socket)(rank, addr, port, steps, nbytes)
    print(f"rank {rank} step_s {dt:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
