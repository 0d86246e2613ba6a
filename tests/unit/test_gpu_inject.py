"""The CUPTI/NVTX injection library (timeline/gpu/inject) through its real code path.

Stand-ins (tests/standins, no GPU here): the driver loads CUDA_INJECTION64_PATH
at cuInit and calls InitializeInjection, as NVIDIA's does; a stand-in
libcupti.so.12 built against the real CUPTI 12.9 headers fills the library's
buffers with real-layout records for the stand-in calls; NVTX calls go through
NVIDIA's own header-only nvtx3 loader (NVTX_INJECTION64_PATH).  The recorder
side is a small socket server here that parses the messages of records.h.

The record dtype below is a local parse (the recorder's Python mirror lives on
the gpu-family side); test_record_dtype_matches_header checks it against the
C header with the compiler.
"""
from __future__ import annotations

import json
import select
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from helpers import REPO

WORKLOAD = os.path.join(REPO, "tests", "standins", "gpu_workload.py")
RECORDS_H = os.path.join(REPO, "timeline", "gpu", "records.h")

MSG_HELLO, MSG_RECORDS, MSG_STRINGS, MSG_STATUS = 1, 2, 3, 4
KERNEL, MEMCPY, MEMSET, API, NVTX, SYNC = 1, 2, 3, 4, 5, 6
GF_DRIVER, GF_GRAPH, GF_PEER, GF_OPEN = 1, 2, 4, 8
CBID_cudaLaunchKernel, CBID_cuLaunchKernel = 211, 307   # cupti_runtime_cbid.h / cupti_driver_cbid.h

RECORD = np.dtype([
    ("start", "<u8"), ("end", "<u8"), ("bytes", "<u8"), ("graph_node", "<u8"),
    ("correlation", "<u4"), ("pid", "<u4"), ("tid", "<u4"), ("device", "<u4"), ("context", "<u4"),
    ("stream", "<u4"), ("name", "<u4"), ("domain", "<u4"), ("grid", "<u4", 3), ("block", "<u4", 3),
    ("registers", "<u4"), ("static_smem", "<u4"), ("dynamic_smem", "<u4"), ("graph_id", "<u4"),
    ("kind", "<u2"), ("flags", "<u2"), ("copy_kind", "u1"), ("src_kind", "u1"), ("dst_kind", "u1"),
    ("sync_kind", "u1"), ("value", "<u4"), ("src_device", "<u4"), ("dst_device", "<u4"), ("pad", "<u4"),
])


class Connection:
    def __init__(self, pid: int):
        self.pid, self.raw = pid, bytearray()
        self.hellos, self.statuses, self.strings, self.batches = [], [], {}, []

    def parse(self) -> None:
        o, raw = 0, bytes(self.raw)
        while o + 8 <= len(raw):
            typ, n = struct.unpack_from("<II", raw, o)
            body = raw[o + 8:o + 8 + n]
            assert len(body) == n, "message cut short"
            o += 8 + n
            if typ == MSG_HELLO:
                self.hellos.append(json.loads(body))
            elif typ == MSG_STATUS:
                self.statuses.append(json.loads(body))
            elif typ == MSG_STRINGS:
                p = 0
                while p < n:
                    sid, ln = struct.unpack_from("<II", body, p)
                    self.strings[sid] = body[p + 8:p + 8 + ln].decode()
                    p += 8 + ln
            elif typ == MSG_RECORDS:
                assert n % RECORD.itemsize == 0
                recs = np.frombuffer(body, RECORD)
                # every string a record names was defined before it
                for sid in np.unique(np.concatenate([recs["name"], recs["domain"][recs["kind"] == NVTX]])):
                    assert sid == 0 or sid in self.strings, sid
                self.batches.append(recs)
            else:
                raise AssertionError(f"unknown message type {typ}")
        assert o == len(raw), "trailing bytes"
        self.records = np.concatenate(self.batches) if self.batches else np.zeros(0, RECORD)

    def name(self, sid: int) -> str:
        return self.strings.get(int(sid), "")


class Server:
    """Listens on an abstract unix socket like the recorder; one Connection per peer."""

    def __init__(self, close_at_once: bool = False, never_read: bool = False):
        self.name = f"tl-gpu-test-{os.getpid()}-{id(self)}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind("\0" + self.name)
        self.sock.listen(16)
        self.close_at_once, self.never_read, self.conns, self.threads = close_at_once, never_read, [], []
        self.held = []
        self._lock = threading.Lock()  # held from accept() until the peer's reader is registered
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.setblocking(False)
        while True:
            try:
                select.select([self.sock], [], [], 0.05)
                with self._lock:  # accept and register as one step (finish() checks under the lock)
                    try:
                        c, _ = self.sock.accept()
                    except BlockingIOError:
                        continue
                    c.setblocking(True)
                    self._register(c)
            except (OSError, ValueError):  # the listening socket was closed
                return

    def _register(self, c: socket.socket) -> None:
        pid = struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        conn = Connection(pid)
        self.conns.append(conn)
        if self.close_at_once:
            c.close()
            return
        if self.never_read:  # a stuck recorder: connected, reads nothing
            self.held.append(c)
            return
        t = threading.Thread(target=self._read, args=(c, conn), daemon=True)
        t.start()
        self.threads.append(t)

    @staticmethod
    def _read(c: socket.socket, conn: Connection) -> None:
        while data := c.recv(1 << 20):
            conn.raw += data
        c.close()

    def finish(self) -> list[Connection]:
        # the target has exited, but under load its connection may still wait in the
        # listen backlog: let the accept thread take every pending one first
        for _ in range(500):
            with self._lock:
                if not select.select([self.sock], [], [], 0)[0]:
                    break
            time.sleep(0.01)
        with self._lock:
            threads = list(self.threads)
            self.sock.close()
        for t in threads:
            t.join(10)
        for c in self.held:
            c.close()
        for c in self.conns:
            c.parse()
        return self.conns


def run(libs: dict, mode: str, n: int = 10, server: Server | None = None, **env):
    lib = libs["libtimeline_inject.so"]
    e = dict(os.environ, CUDA_INJECTION64_PATH=lib, NVTX_INJECTION64_PATH=lib,
             PYTHONPATH=os.path.join(REPO, "tests", "standins"))
    for k in ("TIMELINE_GPU_SOCKET", "TIMELINE_CUPTI_PATH", "STANDIN_CUPTI_VERSION", "STANDIN_CUPTI_BUSY"):
        e.pop(k, None)
    if server:
        e["TIMELINE_GPU_SOCKET"] = server.name
    e.update(env)
    r = subprocess.run([sys.executable, WORKLOAD, os.path.dirname(libs["libcudart.so.12"]), mode, str(n)],
                       env=e, capture_output=True, text=True, timeout=60)
    out = json.loads(r.stdout.splitlines()[0]) if r.stdout.strip() else None
    conns = server.finish() if server else []
    return r, out, conns


def by_pid(conns, pid):
    got = [c for c in conns if c.pid == pid]
    assert len(got) == 1, [c.pid for c in conns]
    return got[0]


def test_record_dtype_matches_header(tmp_path):
    """The local parse agrees with records.h, field by field (the compiler says where each is)."""
    fields = [f for f in RECORD.names]
    src = tmp_path / "offs.c"
    src.write_text('#include <stdio.h>\n#include <stddef.h>\n#include "records.h"\nint main(void){\n'
                   'printf("%zu\\n", sizeof(struct tl_gpu_record));\n'
                   + "".join(f'printf("%zu\\n", offsetof(struct tl_gpu_record, {f}));\n' for f in fields)
                   + "return 0;}\n")
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-I", os.path.dirname(RECORDS_H), "-o", str(tmp_path / "offs"), str(src)], check=True)
    got = [int(x) for x in subprocess.run([str(tmp_path / "offs")], capture_output=True, text=True).stdout.split()]
    assert got[0] == RECORD.itemsize == 128
    assert got[1:] == [RECORD.fields[f][1] for f in fields]


def test_library_exports_only_the_entry_points(libs):
    nm = subprocess.run(["nm", "-D", "--defined-only", libs["libtimeline_inject.so"]],
                        capture_output=True, text=True, check=True).stdout.split()
    assert sorted(s for s in nm if s.startswith("Init")) == ["InitializeInjection", "InitializeInjectionNvtx2"]
    ldd = subprocess.run(["ldd", libs["libtimeline_inject.so"]], capture_output=True, text=True).stdout
    assert "cupti" not in ldd and "libcuda" not in ldd  # both come from the target at run time


def test_build_without_headers_is_one_line_naming_what_to_install():
    code = ("import timeline.bpf.build_inject as b; b._roots = lambda: []; "
            "b.OUT = b.OUT.with_name('never-written.so'); b.build(force=True)")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("build: CUDA headers not found"), r.stderr
    assert "pip install nvidia-cuda-cupti-cu12" in r.stderr and "Traceback" not in r.stderr


def test_records_of_each_kind(libs):
    n = 10
    r, out, conns = run(libs, "basic", n, Server(), TIMELINE_GPU_SYNC="1")  # sync records: only when asked
    assert r.returncode == 0, r.stderr
    c = by_pid(conns, out["pid"])
    hello = c.hellos[-1]
    assert hello["active"] and hello["cuda_injection"] and hello["nvtx"], hello
    assert hello["record_layout"] == 12 and hello["cupti_version"] == 28 and hello["runtime_major"] == 12
    assert hello["cupti_path"].endswith("libcupti.so.12") and hello["clock"] == "CLOCK_BOOTTIME"
    assert {"concurrent_kernel", "memcpy", "memcpy2", "memset", "synchronization"} <= set(hello["enabled"])
    assert hello["cupti_preloaded"] == ""
    rec = c.records
    gpu = rec[rec["kind"] != NVTX]
    # CLOCK_BOOTTIME, within the run (GPU times are 1-6 us after the call in the stand-in)
    assert (gpu["start"] >= out["t0"]).all() and (gpu["end"] <= out["t1"] + 10**6).all()
    assert (gpu["end"] >= gpu["start"]).all()

    k = rec[rec["kind"] == KERNEL]
    plain = k[(k["flags"] & GF_GRAPH) == 0]
    assert len(plain) == n + 1 and len(k) == n + 3
    rt_k = plain[:n]
    assert [c.name(x) for x in rt_k["name"]] == ["standin_kernel"] * n
    assert rt_k["grid"].tolist() == [[i + 1, 2, 3] for i in range(n)]
    assert (rt_k["block"] == [64, 4, 1]).all() and (rt_k["dynamic_smem"] == 256).all()
    assert (rt_k["registers"] == 32).all() and (rt_k["static_smem"] == 1024).all()
    assert c.name(plain[-1]["name"]) == "_Z10my_matmulPfS_" and plain[-1]["grid"].tolist() == [7, 1, 1]
    graph = k[(k["flags"] & GF_GRAPH) != 0]
    assert sorted(graph["graph_node"].tolist()) == [1, 2] and (graph["graph_id"] == 0x42).all()

    api = rec[rec["kind"] == API]
    assert (api["tid"] == out["tid"]).all()
    runtime = api[(api["flags"] & GF_DRIVER) == 0]
    assert (runtime["domain"] == CBID_cudaLaunchKernel).sum() == n
    assert (api[(api["flags"] & GF_DRIVER) != 0]["domain"] == CBID_cuLaunchKernel).sum() == 1
    # every kernel, copy, memset and sync ties to exactly one call by correlation id
    work = rec[np.isin(rec["kind"], [KERNEL, MEMCPY, MEMSET, SYNC])]
    assert set(work["correlation"]) <= set(api["correlation"])
    assert len(set(api["correlation"])) == len(api)
    assert (api["start"] <= api["end"]).all()

    m = rec[rec["kind"] == MEMCPY]
    plain_m = m[(m["flags"] & GF_PEER) == 0]
    assert sorted(zip(plain_m["copy_kind"].tolist(), plain_m["bytes"].tolist())) == [(1, 4096), (2, 2048)]
    peer = m[(m["flags"] & GF_PEER) != 0]
    assert len(peer) == 1 and peer[0]["bytes"] == 8192 and (peer[0]["src_device"], peer[0]["dst_device"]) == (0, 1)
    ms = rec[rec["kind"] == MEMSET]
    assert len(ms) == 1 and ms[0]["bytes"] == 1000 and ms[0]["value"] == 0x5A
    s = rec[rec["kind"] == SYNC]
    assert sorted(s["sync_kind"].tolist()) == [3, 4]  # stream, context synchronize

    # flushed at exit; the exit STATUS counts exactly what arrived
    st = c.statuses[-1]
    assert st["when"] == "exit" and st["records_sent"] == len(rec) and st["records_lost"] == 0
    assert st["cupti_dropped"] == 0 and st["buffers_lost"] == 0


def test_nvtx_ranges_nested_with_domains(libs):
    r, out, conns = run(libs, "basic", 2, Server())
    assert r.returncode == 0, r.stderr
    c = by_pid(conns, out["pid"])
    nv = c.records[c.records["kind"] == NVTX]
    assert (nv["tid"] == out["tid"]).all()
    assert (nv["start"] >= out["t0"]).all() and (nv["end"] <= out["t1"] + 10**8).all()
    named = {c.name(x["name"]): x for x in nv}
    lv = [named[f"level{i}"] for i in range(3)]
    assert [x["value"] for x in lv] == [0, 1, 2]  # depth
    for outer, inner in zip(lv, lv[1:]):
        assert outer["start"] <= inner["start"] <= inner["end"] <= outer["end"]
    assert named["startend"]["end"] >= named["startend"]["start"]
    dom_outer, dom_inner = named["domain_outer"], named["registered_message"]
    assert c.name(dom_outer["domain"]) == c.name(dom_inner["domain"]) == "standin.domain"
    assert dom_outer["start"] <= dom_inner["start"] <= dom_inner["end"] <= dom_outer["end"]
    assert dom_inner["value"] == dom_outer["value"] + 1
    assert "wide_\u00b5s" in named and named["level0"]["domain"] == 0
    assert named["left_open"]["flags"] & GF_OPEN and not named["level0"]["flags"] & GF_OPEN
    assert c.statuses[-1]["nvtx_records"] == len(nv)


def test_nvtx_without_cuda(libs):
    """NVTX alone (no cuInit): ranges arrive, HELLO says CUDA was not injected."""
    r, out, conns = run(libs, "nvtx", 0, Server())
    assert r.returncode == 0, r.stderr
    c = by_pid(conns, out["pid"])
    assert c.hellos[0]["nvtx"] and not c.hellos[0]["cuda_injection"]
    assert sorted(c.name(x) for x in c.records["name"]) == ["level0", "level1", "level2"]


def test_nvtx_deeper_than_the_stack(libs):
    """Past the per-thread stack (128) ranges go unrecorded; those recorded pair up right."""
    r, out, conns = run(libs, "deep", 130, Server())
    assert r.returncode == 0, r.stderr
    nv = by_pid(conns, out["pid"]).records
    c = by_pid(conns, out["pid"])
    assert sorted((c.name(x["name"]), int(x["value"])) for x in nv) == sorted((f"d{i}", i) for i in range(128))
    assert not (nv["flags"] & GF_OPEN).any()


def test_crash_after_periodic_flush_keeps_flushed_records(libs):
    n = 25
    r, out, conns = run(libs, "crash", n, Server())
    assert r.returncode == -signal.SIGABRT
    c = by_pid(conns, out["pid"])
    k = c.records[c.records["kind"] == KERNEL]
    assert len(k) == n and (k["start"] >= out["t0"]).all() and (k["end"] <= out["t1"]).all()
    nv = c.records[c.records["kind"] == NVTX]
    assert sorted(c.name(x) for x in nv["name"]) == ["level0", "level1"]
    assert not any(s["when"] == "exit" for s in c.statuses)  # it really died without its exit flush


def test_no_libcupti_target_runs_normally(libs, tmp_path):
    """A runtime dir without libcupti: the target runs, HELLO says why nothing is recorded."""
    for name in ("libcudart.so.12", "libcuda.so.1", "libnvtx_caller.so"):
        shutil.copy(libs[name], tmp_path / name)
    bare = dict(libs, **{k: str(tmp_path / k) for k in ("libcudart.so.12", "libcuda.so.1", "libnvtx_caller.so")})
    r, out, conns = run(bare, "basic", 5, Server(), CUDA_HOME=str(tmp_path))
    assert r.returncode == 0, r.stderr
    c = by_pid(conns, out["pid"])
    hello = next(h for h in c.hellos if h["cuda_injection"])
    assert not hello["active"] and "no libcupti.so.12 found" in hello["reason"], hello
    assert not np.isin(c.records["kind"], [KERNEL, MEMCPY, MEMSET, API, SYNC]).any()


@pytest.mark.parametrize("env, why", [
    ({"STANDIN_CUPTI_VERSION": "24"}, "CUPTI API version 24"),           # CUDA 12.6 layouts: not decoded
    ({"STANDIN_CUPTI_BUSY": "1"}, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS"),   # another profiler owns CUPTI
])
def test_unusable_cupti_leaves_library_inert(libs, env, why):
    r, out, conns = run(libs, "basic", 5, Server(), **env)
    assert r.returncode == 0, r.stderr
    c = by_pid(conns, out["pid"])
    hello = next(h for h in c.hellos if h["cuda_injection"])
    assert not hello["active"] and why in hello["reason"], hello
    assert not np.isin(c.records["kind"], [KERNEL, MEMCPY, API]).any()


def test_hello_names_a_libcupti_loaded_before_us(libs):
    """Another CUPTI user in the process (torch's Kineto loads libcupti at import): HELLO says so."""
    r, out, conns = run(libs, "basic", 2, Server(), GPU_WORKLOAD_PRELOAD_CUPTI=libs["libcupti.so.12"])
    assert r.returncode == 0, r.stderr
    hello = by_pid(conns, out["pid"]).hellos[-1]
    assert hello["cupti_preloaded"] == libs["libcupti.so.12"] and hello["active"], hello


def test_cuda13_record_layout(libs):
    """A CUPTI 13.0 (stand-in built against the CUDA 13 CUPTI headers: CUpti_ActivityKernel10)
    is decoded with the CUDA 13 decoder."""
    if "libcupti.so.13" not in libs:
        pytest.skip("no CUDA 13 CUPTI headers here: the library was built without the CUDA 13 decoder")
    r, out, conns = run(libs, "basic", 4, Server(), TIMELINE_CUPTI_PATH=libs["libcupti.so.13"], TIMELINE_GPU_SYNC="1")
    assert r.returncode == 0, r.stderr
    c = by_pid(conns, out["pid"])
    hello = c.hellos[-1]
    assert hello["active"] and hello["record_layout"] == 13 and hello["cupti_version"] >= 130000, hello
    k = c.records[c.records["kind"] == KERNEL]
    assert len(k) == 4 + 1 + 2 and c.name(k[4]["name"]) == "_Z10my_matmulPfS_"
    assert k[:4]["grid"].tolist() == [[i + 1, 2, 3] for i in range(4)] and (k[:4]["dynamic_smem"] == 256).all()
    assert sorted(k["graph_node"].tolist()) == [0, 0, 0, 0, 0, 1, 2]
    api = c.records[c.records["kind"] == API]
    assert set(k["correlation"]) <= set(api["correlation"]) and (api["tid"] == out["tid"]).all()
    assert (c.records["kind"] == MEMSET).sum() == 1 and (c.records["kind"] == SYNC).sum() == 2


def test_explicit_cupti_path(libs):
    r, out, conns = run(libs, "basic", 3, Server(), TIMELINE_CUPTI_PATH=libs["libcupti.so.12"])
    assert r.returncode == 0, r.stderr
    c = by_pid(conns, out["pid"])
    assert c.hellos[-1]["cupti_path"] == libs["libcupti.so.12"] and c.hellos[-1]["active"]
    assert (c.records["kind"] == KERNEL).sum() == 3 + 1 + 2


@pytest.mark.parametrize("close_at_once", [False, True])
def test_recorder_gone_target_unaffected(libs, close_at_once):
    """No listener at all, or one that hangs up at once: same output, exit 0, no SIGPIPE."""
    if close_at_once:
        srv = Server(close_at_once=True)
        r, out, _ = run(libs, "basic", 50, srv)
    else:
        r, out, _ = run(libs, "basic", 50, None, TIMELINE_GPU_SOCKET=f"tl-gpu-nobody-{os.getpid()}")
    assert r.returncode == 0, r.stderr
    assert out["t1"] > out["t0"] and r.stderr == ""


def test_not_recording_is_a_no_op(libs):
    """Injection paths set but no recorder socket named: nothing connects, the target runs."""
    r, out, _ = run(libs, "basic", 5, None)
    assert r.returncode == 0 and out is not None, r.stderr


def test_fork_child_reconnects(libs):
    srv = Server()
    r, out, conns = run(libs, "fork", 3, srv)
    assert r.returncode == 0, r.stderr
    parent, child = by_pid(conns, out["pid"]), by_pid(conns, out["child"]["pid"])
    assert child.hellos[0]["forked_from"] == out["pid"] and parent.hellos[0]["forked_from"] == 0
    cn = [child.name(x) for x in child.records["name"]]
    assert cn == ["child_range"] and (child.records["tid"] == out["child"]["tid"]).all()
    assert "child_range" not in [parent.name(x) for x in parent.records["name"]]
    assert (parent.records["kind"] == KERNEL).sum() == 3 + 1 + 2  # the child sent none of the parent's
    assert child.statuses[-1]["when"] == "exit" and parent.statuses[-1]["when"] == "exit"


def test_quiet_fork_child_does_not_connect(libs):
    """A worker that makes no NVTX/CUDA call sends nothing, not even an exit STATUS."""
    r, out, conns = run(libs, "fork", 3, Server(), GPU_WORKLOAD_CHILD_NVTX="0")
    assert r.returncode == 0, r.stderr
    assert [c.pid for c in conns] == [out["pid"]]


def test_real_libcupti_found_and_checked_without_a_driver(libs, tmp_path):
    """NVIDIA's libcupti 12.9 (nvidia-cuda-cupti-cu12) found next to the real libcudart the
    process loaded, every function resolved, version read; with no GPU driver here CUPTI
    refuses to start, and the library says so and stays inert.  (InitializeInjection is
    called directly, as the driver would at cuInit.)"""
    import nvidia.cuda_runtime as m
    cudart = os.path.join(list(m.__path__)[0], "lib", "libcudart.so.12")
    prog = tmp_path / "real.py"
    prog.write_text("import ctypes, sys\nctypes.CDLL(sys.argv[1])\n"
                    "print(ctypes.CDLL(sys.argv[2]).InitializeInjection())\n")
    srv = Server()
    env = dict(os.environ, TIMELINE_GPU_SOCKET=srv.name)
    env.pop("TIMELINE_CUPTI_PATH", None)
    r = subprocess.run([sys.executable, str(prog), cudart, libs["libtimeline_inject.so"]], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
    (c,) = srv.finish()
    hello = c.hellos[0]
    assert os.path.realpath(hello["cupti_path"]).endswith("nvidia/cuda_cupti/lib/libcupti.so.12"), hello
    assert hello["cupti_version"] == 28 and hello["record_layout"] == 12 and hello["runtime_major"] == 12
    assert not hello["active"] and "CUPTI_ERROR" in hello["reason"], hello
    # the optional entry points the library uses are all in NVIDIA's 12.9 library
    nm = subprocess.run(["nm", "-D", "--defined-only", hello["cupti_path"]], capture_output=True, text=True).stdout
    exported = {line.split()[-1].split("@")[0] for line in nm.splitlines()}
    assert {"cuptiActivityRegisterTimestampCallback", "cuptiActivityFlushPeriod", "cuptiActivityEnableRuntimeApi",
            "cuptiActivityEnableDriverApi", "cuptiActivityGetNumDroppedRecords"} <= exported


def test_hello_is_json_whatever_the_path(libs):
    """A hostile TIMELINE_CUPTI_PATH (quote, newline, backslash) still gives a well-formed HELLO."""
    bad = '/nonexistent/a"b\\c\nd/libcupti.so.12'
    r, out, conns = run(libs, "basic", 2, Server(), TIMELINE_CUPTI_PATH=bad)
    assert r.returncode == 0, r.stderr
    hello = next(h for h in by_pid(conns, out["pid"]).hellos if h["cuda_injection"])  # parsed as JSON
    assert not hello["active"] and hello["reason"].startswith("TIMELINE_CUPTI_PATH " + bad), hello
