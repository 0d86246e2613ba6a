"""The CUDA family without eBPF: probe table, decoding, symbols, discovery, converter.

Synthetic records stand for what cuda.bpf.c writes; the ELF tests use the
stand-in libraries of tests/standins (compiled here with cc).
"""
import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from timeline import events as ev
from timeline.converters import convert
from timeline.cuda import discovery as dsc
from timeline.cuda import records as cuda_records
from timeline.cuda.decode import decode_group
from timeline.cuda.probes import BY_NAME, PROBES, table_meta
from timeline.cuda.symbols import ElfSymbols
from timeline.demangle import demangle
from timeline.trace_processor import open_trace
from rawlog_factory import BOOT0, LogBuilder
from standins import build


def test_cookies_carry_id_and_what_to_copy():
    assert len({p.name for p in PROBES}) == len(PROBES)
    for p in PROBES:
        ck = p.cookie()
        assert ck & cuda_records.CK_ID_MASK == p.id and PROBES[p.id] is p
        slots = [s for _, s, _ in p.fields if isinstance(s, int)]
        # stack slots 6-8 are only there when the cookie asks for them
        if any(s >= 6 for s in slots) and not p.config:
            assert ck & cuda_records.CK_STACK, p.name
        assert bool(ck & cuda_records.CK_RUNTIME) == (p.api == "runtime")
        assert bool(ck & cuda_records.CK_LAUNCH) == p.launch
        if p.out is not None:
            assert (ck >> cuda_records.CK_OUT_SHIFT) & 15 == p.out + 1
    assert BY_NAME["cuModuleGetFunction"].cookie() & cuda_records.CK_DRIVER == 0  # never dropped as nested
    assert BY_NAME["cuLaunchKernel"].cookie() & cuda_records.CK_DRIVER


def _recs(name, rows, kind=cuda_records.CUDA_CALL, ret=0, out=0, flags=cuda_records.CF_HAS_RET):
    r = np.zeros(len(rows), cuda_records.CUDA_EVENT)
    for i, args in enumerate(rows):
        r["args"][i, :len(args)] = args
    r["cookie"], r["kind"], r["ret"], r["out"], r["flags"] = BY_NAME[name].cookie(), kind, ret, out, flags
    return r


def test_launch_geometry_all_three_layouts():
    # cudaLaunchKernel: dim3 by value in two registers each; shmem, stream on the stack
    (a,) = decode_group(BY_NAME["cudaLaunchKernel"],
                        _recs("cudaLaunchKernel", [[0x10, 70000 | 2 << 32, 3, 128 | 1 << 32, 4, 0, 4096, 0xAB]]))
    assert (a["grid"], a["block"], a["shmem"], a["stream"], a["ret"]) == ("70000,2,3", "128,1,4", 4096, "0xab", 0)
    # cudaLaunchKernelExC: the 40-byte config copied into slots 4-8
    cfg = [5 | 6 << 32, 7 | 8 << 32, 9 | 10 << 32, 2048, 0xCD]
    (b,) = decode_group(BY_NAME["cudaLaunchKernelExC"], _recs("cudaLaunchKernelExC", [[0, 0, 0, 0, *cfg]]))
    assert (b["grid"], b["block"], b["shmem"], b["stream"]) == ("5,6,7", "8,9,10", 2048, "0xcd")
    # cuLaunchKernel: nine scalars, blockDimZ/shmem/stream on the stack; entry-only: no ret
    (c,) = decode_group(BY_NAME["cuLaunchKernel"], _recs("cuLaunchKernel", [[0xF, 1, 2, 3, 4, 5, 6, 1 << 32 | 99, 0x5]],
                                                           kind=cuda_records.CUDA_ENTRY, flags=0))
    assert (c["grid"], c["block"], c["shmem"], c["stream"]) == ("1,2,3", "4,5,6", 99, "0x5") and "ret" not in c


def test_results_only_from_successful_calls():
    flags = cuda_records.CF_HAS_RET | cuda_records.CF_OUT
    ok, bad = (decode_group(BY_NAME["cudaMalloc"], _recs("cudaMalloc", [[0x7FF0, 1 << 20]], ret=r, out=0xDEAD,
                                                         flags=flags))[0] for r in (0, 2))
    assert ok == {"size": 1 << 20, "ptr": "0xdead", "ret": 0}
    assert bad == {"size": 1 << 20, "ret": 2, "error": "cudaErrorMemoryAllocation"}
    (n,) = decode_group(BY_NAME["ncclAllReduce"], _recs("ncclAllReduce", [[1, 2, 10, 9, 4, 0xC, 0x5]]))
    assert (n["datatype"], n["op"], n["bytes"], n["stream"]) == ("bfloat16", "avg", 20, "0x5")
    (m,) = decode_group(BY_NAME["cuMemcpyDtoHAsync_v2"], _recs("cuMemcpyDtoHAsync_v2", [[1, 2, 300, 7]]))
    assert (m["kind"], m["bytes"]) == ("D2H", 300)


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    return build(str(tmp_path_factory.mktemp("standins")))


def test_exports_and_symbols(standins):
    nccl = ElfSymbols(standins["libnccl.so.2"])
    offs = nccl.exports(["ncclAllReduce", "pncclAllReduce", "ncclBroadcast"])
    assert offs["ncclAllReduce"] == offs["pncclAllReduce"] and "ncclBroadcast" not in offs  # weak alias
    k = ElfSymbols(standins["libkernels.so"])
    start = k.exports(["_Z9addKernelPfPKfS1_i"])["_Z9addKernelPfPKfS1_i"]
    assert k.lookup(k.offset_to_vaddr(start)) == ("_Z9addKernelPfPKfS1_i", 0)
    assert k.lookup(k.offset_to_vaddr(start) + 4) == ("_Z9addKernelPfPKfS1_i", 4)
    with open(standins["libkernels.so"], "rb") as f:  # the local (static) stub: .symtab only
        (scale,) = ELFFile(f).get_section_by_name(".symtab").get_symbol_by_name("_Z11scaleKernelIfEvPT_S0_i")
    assert k.lookup(scale["st_value"]) == ("_Z11scaleKernelIfEvPT_S0_i", 0)
    assert ElfSymbols(standins["libkernels_stripped.so"]).lookup(scale["st_value"]) is None
    assert demangle("_Z9addKernelPfPKfS1_i") == "addKernel(float*, float const*, float const*, int)"
    assert demangle("cudaMalloc") == "cudaMalloc" and demangle("_Znot_valid") == "_Znot_valid"


def test_library_names_and_site_packages(tmp_path):
    for name, api in (("libcudart.so.12", "runtime"), ("libcudart-9335f6a2.so.12", "runtime"),
                      ("libcuda.so.1", "driver"), ("libcuda.so.575.57.08", "driver"), ("libnccl.so.2", "nccl"),
                      ("libcudart.so", "runtime"), ("libcudadevrt.a", None), ("libcudnn.so.9", None),
                      ("libcuda_stub.so", None)):
        assert dsc.lib_api("/x/" + name) == api, name
    venv = tmp_path / "venv"
    lib = venv / "lib" / "python3.11" / "site-packages" / "nvidia" / "cuda_runtime" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudart.so.12").write_bytes(b"")
    (venv / "bin").mkdir()
    (venv / "bin" / "python").symlink_to("/usr/bin/env")
    (venv / "pyvenv.cfg").write_text("home = /nonexistent/bin\n")
    script = tmp_path / "torchrun"
    script.write_text(f"#!{venv}/bin/python\nprint()\n")
    script.chmod(0o755)
    assert dsc.candidates([str(script)], None)[:1] == [str(lib / "libcudart.so.12")]
    maps = ("7f00-7f10 r-xp 00002000 08:01 1234 /opt/x/libcudart.so.12\n"
            "7f10-7f20 rw-p 00000000 00:00 0 \n7f20-7f30 r--p 00000000 08:01 99 /opt/y\n")
    assert dsc.parse_maps(maps) == [(0x7F00, 0x7F10, 0x2000, 1234, "/opt/x/libcudart.so.12")]
    assert dsc.parse_maps(maps, executable=False) == [(0x7F00, 0x7F10, 0x2000, 1234, "/opt/x/libcudart.so.12"),
                                                      (0x7F20, 0x7F30, 0, 99, "/opt/y")]


def test_vmlib_grows_when_a_process_dlopens_a_library(tmp_path, standins):
    """What the maps watcher relies on to skip reading /proc/PID/maps."""
    import shutil
    import subprocess
    import sys
    from timeline.cuda.plugin import _Proc, _vmlib
    copy = shutil.copy(standins["libkernels.so"], tmp_path / "libkernels_copy.so")
    child = subprocess.Popen([sys.executable, "-c", "import ctypes, sys; print('ready', flush=True); "
                              "sys.stdin.readline(); ctypes.CDLL(sys.argv[1]); print('loaded', flush=True); "
                              "sys.stdin.readline()", copy],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    st = _Proc(1)
    try:
        # measured once its start-up (which maps ctypes' own library) is over: on a loaded
        # machine the first reading could come while it still imported
        assert child.stdout.readline() == "ready\n"
        before = _vmlib(child.pid, st)
        assert before is not None and before == _vmlib(child.pid, st)  # unchanged while nothing is mapped
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "loaded\n"
        assert _vmlib(child.pid, st) > before
        assert str(copy) in dsc.read_maps(child.pid)
        child.stdin.write("\n")
        child.stdin.close()
        child.wait()
        assert _vmlib(child.pid, st) is None  # gone (the open file does not follow a reused pid)
    finally:
        st.close()
        if child.poll() is None:
            child.kill()


def test_counters_and_flows_from_a_synthetic_log(tmp_path, standins):
    b = LogBuilder()
    b.header["cuda"] = {"probes": table_meta(), "mode": "full"}
    b.header["rings"][str(cuda_records.RING_CUDA)] = {"name": "cuda", "record_size": cuda_records.CUDA_EVENT.itemsize,
                                                      "stride": ev.ring_stride(cuda_records.CUDA_EVENT)}
    pid = 1000

    def call(name, ts, args, ret=0, out=0):
        r = _recs(name, [args], ret=ret, out=out, flags=cuda_records.CF_HAS_RET | (cuda_records.CF_OUT if out else 0))
        r["ts"], r["dur"], r["tid"], r["tgid"] = BOOT0 + ts, 1000, pid, pid
        return r
    recs = [call("cudaMalloc", 10_000, [0x7F00, 100], out=0xA),        # +100
            call("cuMemAlloc_v2", 20_000, [0x7F08, 50], out=0xB),      # +50 (driver, same counter)
            call("cudaMalloc", 30_000, [0x7F00, 999], ret=2),          # failed: nothing
            call("cudaFree", 40_000, [0xA]),                           # -100
            call("cudaFree", 50_000, [0xDEAD]),                        # never allocated here: ignored
            call("cudaMemcpy", 60_000, [1, 2, 4096, 1]),
            call("cudaMemcpy", 70_000, [1, 2, 1 << 30, 2], ret=35),    # failed copy: no bytes
            call("cudaStreamBeginCapture", 80_000, [0x5, 0]),
            call("cudaStreamEndCapture", 90_000, [0x5, 0x7F10], out=0x6A),
            call("cudaGraphInstantiate", 100_000, [0x7F18, 0x6A, 0], out=0x6B),
            call("cudaGraphLaunch", 110_000, [0x6B, 0x5]),
            call("cudaGraphLaunch", 120_000, [0x6C, 0x5])]             # another exec: no flow
    b.blocks.append(("ring", (cuda_records.RING_CUDA, ev.encode_ring_bytes(np.concatenate(recs)))))
    raw = b.write(str(tmp_path / "syn.tlraw"))
    out = str(tmp_path / "syn.pftrace")
    convert(raw, out)
    with open_trace(out) as tp:
        alloc = tp.query("""select value from counter join counter_track t on counter.track_id = t.id
                            where t.name = 'cuda.allocated_bytes' order by ts""").rows
        assert [v for (v,) in alloc] == [100, 150, 50]
        (total,) = tp.query("""select sum(value) * 0.1 from counter join counter_track t on counter.track_id = t.id
                               where t.name like 'cuda.memcpy_bytes_per_s.%'""").rows[0]
        assert total == 4096
        flows = tp.query("""select so.name, si.name from flow f join slice so on so.id = f.slice_out
                            join slice si on si.id = f.slice_in order by so.ts""").rows
        assert flows == [("cudaStreamBeginCapture", "cudaStreamEndCapture"),
                         ("cudaStreamEndCapture", "cudaGraphInstantiate"), ("cudaGraphInstantiate", "cudaGraphLaunch")]
        (n,) = tp.query("select count(*) from slice where category in ('cuda', 'cuda_driver')").rows[0]
        assert n == len(recs)



def test_kernel_names_from_registration_handles_and_mapped_strings(tmp_path):
    """nvcc's stubs (CUDA 12.8+/13) launch a cudaKernel_t made by __cudaGetKernel
    from the host symbol that __cudaRegisterFunction tied to a device name; cuDNN
    names driver functions longer than a NAME record holds.  Both names are read
    back whole from the mapped library file."""
    b = LogBuilder()
    b.header["cuda"] = {"probes": table_meta(), "mode": "full"}
    b.header["rings"][str(cuda_records.RING_CUDA)] = {"name": "cuda", "record_size": cuda_records.CUDA_EVENT.itemsize,
                                                      "stride": ev.ring_stride(cuda_records.CUDA_EVENT)}
    pid = 1000
    reg_name = b"_Z29vectorized_elementwise_kernelILi4EN2at6native11FillFunctorIfEEEviT0_"
    long_name = b"sm80_xmma_wgrad_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tile16x64x64"
    lib = tmp_path / "libkernels.so"
    blob = bytearray(0x3000)
    blob[0x1010:0x1010 + len(reg_name)] = reg_name
    blob[0x2020:0x2020 + len(long_name)] = long_name
    lib.write_bytes(bytes(blob))
    base = 0x7F0000000000  # the .rodata mapping: file offset 0x1000 at base
    b.blocks.append(("meta", {"type": "maps", "pid": pid, "ts": BOOT0, "entries": [[base, base + 0x2000, 0x1000,
                                                                                     str(lib)]]}))
    host, handle, cufunc = 0x7E0000001230, 0x37E00000, 0x55AA00

    def call(name, ts, args, out=0, kind=cuda_records.CUDA_CALL, flags=None):
        f = cuda_records.CF_HAS_RET | (cuda_records.CF_OUT if out else 0) if flags is None else flags
        r = _recs(name, [args], kind=kind, out=out, flags=f)
        r["ts"], r["dur"], r["tid"], r["tgid"] = BOOT0 + ts, 1000, pid, pid
        return r
    cut = np.zeros(1, cuda_records.CUDA_EVENT)  # the NAME record cuda.bpf.c writes: the first 71 bytes + NUL
    cut["args"].view(np.uint8).reshape(-1)[:71] = np.frombuffer(long_name[:71], np.uint8)
    cut["cookie"], cut["kind"], cut["out"] = BY_NAME["cuModuleGetFunction"].cookie(), cuda_records.CUDA_NAME, cufunc
    cut["flags"] = cuda_records.CF_HAS_RET | cuda_records.CF_OUT | cuda_records.CF_TRUNC
    cut["ts"], cut["tid"], cut["tgid"] = BOOT0 + 4_000, pid, pid
    named = np.zeros(1, cuda_records.CUDA_EVENT)
    named["args"].view(np.uint8).reshape(-1)[:12] = np.frombuffer(b"cutlass_gemm", np.uint8)
    named["cookie"], named["kind"], named["out"] = BY_NAME["cuLibraryGetKernel"].cookie(), cuda_records.CUDA_NAME, 0xCE
    named["flags"] = cuda_records.CF_HAS_RET | cuda_records.CF_OUT
    named["ts"], named["tid"], named["tgid"] = BOOT0 + 13_000, pid, pid
    recs = [call("__cudaRegisterFunction", 1_000, [0, host, base + 0x10, base + 0x10]),
            call("__cudaGetKernel", 2_000, [0x7FFC0000, host], out=handle),
            call("cuModuleGetFunction", 4_000, [0x7FFC0008, 0x9000, base + 0x1020], out=cufunc), cut,
            call("cudaLaunchKernel", 10_000, [handle, 1 | 1 << 32, 1, 128 | 1 << 32, 1, 0, 0, 0]),
            call("cudaLaunchKernel", 11_000, [0x4444, 1 | 1 << 32, 1, 128 | 1 << 32, 1, 0, 0, 0]),
            call("cuLaunchKernel", 12_000, [cufunc, 1, 1, 1, 32, 1, 1, 0, 0]),
            # a CUkernel named by cuLibraryGetKernel, launched through cuKernelGetFunction's CUfunction
            call("cuLibraryGetKernel", 13_000, [0x7FFC0010, 0x9100, base + 0x1020], out=0xCE), named,
            call("cuKernelGetFunction", 14_000, [0x7FFC0018, 0xCE], out=0xF0),
            call("cuLaunchKernel", 15_000, [0xF0, 1, 1, 1, 32, 1, 1, 0, 0])]
    b.blocks.append(("ring", (cuda_records.RING_CUDA, ev.encode_ring_bytes(np.concatenate(recs)))))
    raw = b.write(str(tmp_path / "names.tlraw"))
    out = str(tmp_path / "names.pftrace")
    convert(raw, out)
    with open_trace(out) as tp:
        rows = tp.query("""select s.name, a.display_value from slice s join args a using (arg_set_id)
                           where a.key = 'debug.kernel' order by s.ts""").rows
        names = {n for (n,) in tp.query("select distinct name from slice").rows}
    assert rows == [("cudaLaunchKernel", demangle(reg_name.decode())), ("cudaLaunchKernel", "0x4444"),
                    ("cuLaunchKernel", long_name.decode()), ("cuLaunchKernel", "cutlass_gemm")]
    assert rows[0][1] == "void vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int, " \
                         "at::native::FillFunctor<float>)"
    # registration and handle lookups feed names; they are not slices
    assert not names & {"__cudaRegisterFunction", "__cudaGetKernel", "cuKernelGetFunction"}


def test_probe_roles_are_members_and_a_misspelt_role_fails():
    """Roles are shared by probes.py, decode.py and converter.py: an enum, so a
    typo fails loudly instead of silently skipping the converter's branch (issue 10)."""
    from timeline.cuda.probes import PROBES, Role
    assert all(isinstance(p.role, Role) for p in PROBES)
    used = {p.role for p in PROBES} - {Role.NONE}
    assert used == set(Role) - {Role.NONE}, set(Role) - used  # no member without a probe
    with pytest.raises(ValueError):
        Role("launch_rtt")
