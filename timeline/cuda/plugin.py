"""Recorder plugin of the `cuda` family: find CUDA/NCCL libraries, attach uprobes.

Before launch: every candidate copy of libcudart/libcuda/libnccl (see
discovery.py) gets probes, so a library the target dlopen()s later fires from
its first call.  While recording (tick, on the consumer thread): the recorded
processes' /proc/PID/maps are read to attach to copies that appear elsewhere,
and to snapshot the executable mappings the converter needs to name launched
kernels.  A maps read costs ~0.5 ms (1-2k lines for a torch process), so it
happens only when a process is new or exec'ed (from the proc ring, through
ctx.processes) or when its VmLib (size of executable library mappings, from
/proc/PID/status: a few µs) changed since the last read, which a dlopen
always does; VmLib is checked every 0.5 s, every 0.1 s while CUDA calls flow.

Raw log META blocks written here:
  {"type": "cuda_libs", "ts", "libs": [{path, api, functions, found_by, ...}]}
  {"type": "maps", "pid", "ts", "entries": [[start, end, offset, path]], "env": {RANK...}}
  {"type": "cuda_stats", "ts", "nested_dropped", "stash_full", "lost_returns", ...}
"""
from __future__ import annotations

import os
import struct
import threading
import time

import numpy as np

from .. import events as ev
from ..errors import UserError
from ..libbpf import BPFError
from ..recorder_plugins import RecorderContext, RecorderPlugin
from ..registry import capture_range_kind
from . import attach, window
from . import discovery as dsc
from . import records as cuda_records
from .family import CUDA_MODES
from .probes import APIS, probes_for, table_meta
from ..safe_input import fd_name
from .symbols import ElfSymbols

STATS = ("nested_dropped", "stash_full", "lost_returns", "no_task_storage")  # cuda.bpf.c STAT_*
CHECK_EVERY = 0.5    # s between VmLib checks of a process
CHECK_ACTIVE = 0.1   # ... while CUDA calls flow (see _scan)
MAPS_EVERY = 30.0    # s between maps reads regardless: a dlclose and a dlopen of the same size cancel out


class _Proc:
    """What is known of one recorded process's mappings."""
    __slots__ = ("gen", "fd", "vmlib", "maps_hash", "next_check", "next_read", "snapshot")

    def __init__(self, gen: int):
        self.gen, self.fd, self.vmlib, self.maps_hash = gen, -1, None, None
        self.next_check = self.next_read = 0.0
        self.snapshot = None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _vmlib(pid: int, st: _Proc) -> int | None:
    """VmLib of /proc/PID/status in kB, None when the process is gone (or a
    zombie: no mm).  The file stays open: pread regenerates it."""
    try:
        if st.fd < 0:
            st.fd = os.open(f"/proc/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
        raw = os.pread(st.fd, 4096, 0)
    except OSError:  # ESRCH once the process is gone, even if its pid is reused
        return None
    i = raw.find(b"\nVmLib:")
    if i < 0:
        return None
    return int(raw[i + 7: raw.index(b"kB", i)])


class CudaPlugin(RecorderPlugin):
    family = "cuda"

    def __init__(self, cfg, options):
        super().__init__(cfg, options)
        self.mode = options.cuda_mode
        self.extra = [os.path.abspath(p) for p in options.cuda_libs]
        self.apis = APIS
        self.lock = threading.Lock()
        self.libs: dict[tuple, dict] = {}      # (dev, ino) -> what was attached there
        self.failed: dict[tuple, str] = {}     # (dev, ino) or ("path", path) -> why not
        self.skipped: set[tuple] = set()
        self.mapped: set[tuple] = set()        # (inode, path) of maps entries already looked at
        # library files are opened as the user the target runs as (discovery): not as
        # root, whom a name the target controls could point at a FIFO or a root-only file
        self.reader = cfg.target_user if cfg is not None else None
        self.seen_records = 0                  # cuda ring records at the last tick
        self.next_active = 0.0
        self.procs: dict[int, _Proc] = {}      # pid -> its mappings' state
        self.live: dict[int, int] | None = None  # ctx.processes at the last scan
        self.next_due = 0.0                    # earliest next_check of self.procs
        self.attach_s = 0.0

    # -- capture windows (window.py) -------------------------------------
    def capture_range(self) -> str:
        # a kind cut at conversion (nvtx:NAME, timeline/capture_cut.py) is not cut here
        return self.options.capture_range if self.options.capture_range == "cudaProfilerApi" else ""

    def capture_marks(self, ring: int, rows) -> list[tuple[int, bool]]:
        if ring != cuda_records.RING_CUDA or not self.capture_range():
            return []
        return window.profiler_marks(rows)

    # -- plugin hooks -------------------------------------------------------
    def preflight(self) -> None:
        if self.capture_range() and getattr(self.cfg, "delay", 0):
            raise UserError("--capture-range and --delay both choose when recording starts: use one")
        if self.mode not in CUDA_MODES:
            raise UserError(f"--cuda-mode must be full or entry-only, not {self.mode!r}")
        for p in self.extra:
            if not os.path.isfile(p):
                raise UserError(f"--cuda-lib {p}: no such file")

    def _cut_at_conversion(self) -> bool:
        """--capture-range (an option of ours) is of a kind cut when converted (nvtx:NAME)."""
        found = capture_range_kind(self.options.capture_range)
        return found is not None and bool(found[1].window)

    def header(self) -> dict:
        out = {"cuda": {"probes": table_meta(), "mode": self.mode}}
        if self._cut_at_conversion():  # said where the conversion looks first
            out["capture_range"] = self.options.capture_range
        return out

    def before_launch(self, ctx: RecorderContext) -> None:
        if self._cut_at_conversion():
            ctx.write_meta({"type": "capture", "range": self.options.capture_range})
        t0 = time.monotonic()
        found = [(p, "--cuda-lib", None, None) for p in self.extra]
        if self.cfg.command:
            found += [(p, "candidate", dsc.lib_api(p), None)
                      for p in dsc.candidates(self.cfg.command, os.environ.get("PATH"), self.reader)]
        fds = dsc.open_libs([f[0] for f in found], self.reader)
        new = [self._attach_opened(ctx, *f, fd) for f, fd in zip(found, fds)]
        self._write_libs(ctx, new)
        self.attach_s += time.monotonic() - t0

    def on_target(self, ctx: RecorderContext) -> None:
        self._scan(ctx, force=True)

    def tick(self, ctx: RecorderContext) -> None:
        self._scan(ctx, force=False)

    def stop(self, ctx: RecorderContext) -> None:
        self._scan(ctx, force=True)  # last mappings of processes still alive
        for st in self.procs.values():
            st.close()
        self.procs.clear()
        stats = self._stats(ctx)
        ctx.write_meta({"type": "cuda_stats", "ts": ctx.now_ns(), **stats})
        libs = sorted(self.libs.values(), key=lambda d: d["path"])
        if libs:
            ctx.summary.append(f"cuda: probes on {len(libs)} libraries ({self.mode}, {self.attach_s:.2f}s to attach):")
            for d in libs:
                ctx.summary.append(f"  {d['api']:7} {d['functions']:3} functions  {d['path']}")
        else:
            ctx.summary.append("cuda: no CUDA runtime, driver or NCCL library found (give one with --cuda-lib)")
        for key, why in self.failed.items():
            ctx.summary.append(f"cuda: warning: {why}")
        if stats["nested_dropped"]:
            ctx.summary.append(f"cuda: {stats['nested_dropped']:,} driver calls made inside traced runtime "
                               "calls were folded into them")

    # -- hangs (timeline.hang) -----------------------------------------------
    def progress(self, ctx: RecorderContext) -> int:
        """Grows while CUDA/NCCL calls return: the cuda ring's record count."""
        return ctx.session.readers[cuda_records.RING_CUDA].records

    def in_flight(self, ctx: RecorderContext, threads: dict[int, int], now_ns: int) -> dict[int, dict]:
        """tid -> the innermost call open on it ({"call", "since"}); the open calls
        go into the raw log as call records ending at now_ns (cuda.inflight)."""
        from . import inflight
        from .probes import PROBES

        tls = ctx.session.objects["cuda"].map("cuda_tls")
        calls = []
        for tid, tgid in threads.items():
            calls += [(tgid, tid, ts, ck, args) for ts, ck, args in inflight.open_calls(tls, tid)]
        if not calls:
            return {}
        ctx.write_ring(cuda_records.RING_CUDA, ev.encode_ring_bytes(inflight.records(calls, now_ns)))
        out = {}
        for tgid, tid, ts, ck, _ in calls:  # outermost first: the innermost wins
            pid = ck & cuda_records.CK_ID_MASK
            out[tid] = {"call": PROBES[pid].name if pid < len(PROBES) else f"probe {pid}", "since": ts}
        return out

    # -- attaching ----------------------------------------------------------
    def _attach_opened(self, ctx, path: str, found_by: str, api: str | None, pid: int | None, fd):
        """_attach on `fd` (from dsc.open_libs), which is closed here; fd may be
        the OSError opening gave instead: a missing file is no news, anything
        else (a FIFO, a root-only file) one warning."""
        if isinstance(fd, OSError):
            if not isinstance(fd, FileNotFoundError):
                with self.lock:
                    self.failed.setdefault(("path", path), f"cannot read {path}: {fd.strerror}")
            return None
        try:
            return self._attach(ctx, path, fd, found_by, api, pid)
        finally:
            os.close(fd)

    def _attach(self, ctx, path: str, fd: int, found_by: str, api: str | None, pid: int | None = None):
        """Probes on the library open at `fd` (path: what it is called).  Its
        symbols are read through fd with a bound, and the probes go on the file
        fd holds (its /proc/self/fd name), whatever `path` names by now."""
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        with self.lock:
            if key in self.libs or key in self.failed or key in self.skipped:
                return None
            apis = [api] if api else list(self.apis)
            want = [p for a in apis if a in self.apis for p in probes_for(a)]
            if not want:
                return None
            try:
                offsets = ElfSymbols(path, fd).exports(p.name for p in want)  # bounded read through fd
            except Exception as e:
                self.failed[key] = f"cannot read {path}: {e}"
                return None
            plan, names, seen = [], [], set()
            for p in want:
                off = offsets.get(p.name)
                if off is None or off in seen:  # aliases share an address: probe it once
                    continue
                seen.add(off)
                plan.append((off, p.cookie(), self.mode == "entry-only" and p.launch))
                names.append(p.name)
            if not plan:  # e.g. a stub library: nothing to probe, and no need to look again
                self.skipped.add(key)
                return None
            held = fd_name(fd)
            errors = [e.replace(held, path) for e in attach.attach(ctx.session.objects["cuda"], held, plan)]
            done = names if not errors or len(errors) < len(plan) else []
            if not done:
                if errors:
                    self.failed[key] = f"no probe attached to {path}: {errors[0]}"
                return None
            info = {"path": path, "api": api or "+".join(sorted({q.api for q in want if q.name in done})),
                    "functions": len(done), "found_by": found_by, "dev": key[0], "inode": key[1],
                    "names": done}
            if pid is not None:
                info["pid"] = pid
            if errors:
                info["errors"] = errors[:5]
            self.libs[key] = info
            return info

    def _write_libs(self, ctx, infos) -> None:
        infos = [i for i in infos if i]
        if infos:
            ctx.write_meta({"type": "cuda_libs", "ts": ctx.now_ns(), "mode": self.mode, "libs": infos})

    # -- watching the tree --------------------------------------------------
    def _scan(self, ctx, force: bool) -> None:
        """force: check every process now (start, end of recording)."""
        now = time.monotonic()
        live = ctx.processes  # replaced by the context whenever a process comes, goes or execs
        # CUDA calls just happened: check now, so the maps that name their
        # kernels are snapshotted before a short-lived process can exit.
        records = ctx.session.readers[cuda_records.RING_CUDA].records
        active = records != self.seen_records and now >= self.next_active
        if not (force or active or live is not self.live or now >= self.next_due):
            return  # the common tick: nothing is due
        if active:
            self.seen_records, self.next_active = records, now + CHECK_ACTIVE
        if live is not self.live:
            self.live = live
            for pid in [p for p in self.procs if p not in live]:
                self.procs.pop(pid).close()
        t0 = time.monotonic()
        new = []
        for pid, gen in live.items():
            st = self.procs.get(pid)
            if st is None or st.gen != gen:  # born or exec'ed: a new image
                if st is not None:
                    st.close()
                st = self.procs[pid] = _Proc(gen)
            elif not (force or active) and now < st.next_check:
                continue
            st.next_check = now + CHECK_EVERY
            vmlib = _vmlib(pid, st)
            if vmlib is None:  # gone: nothing more to read until it is dropped or execs
                st.next_check = float("inf")
                continue
            if vmlib == st.vmlib and now < st.next_read:
                continue
            text = dsc.read_maps(pid)
            if text is None:
                continue
            st.vmlib, st.next_read = vmlib, now + MAPS_EVERY
            h = hash(text)
            if h != st.maps_hash:
                st.maps_hash = h
                new += self._scan_maps(ctx, pid, text, st)
        self.next_due = min((st.next_check for st in self.procs.values()), default=float("inf"))
        self._write_libs(ctx, new)
        if new:
            self.attach_s += time.monotonic() - t0

    def _scan_maps(self, ctx, pid: int, text: str, st: _Proc) -> list:
        entries = dsc.parse_maps(text)
        cuda, todo = False, {}
        for start, end, off, inode, path in entries:
            api = dsc.lib_api(path)
            if api is None:
                continue
            cuda = True
            if api in self.apis and (inode, path) not in self.mapped:
                todo[(inode, path)] = api
        new = self._attach_mapped(ctx, pid, todo) if todo else []
        cuda = cuda or any(i.get("inode") in {e[3] for e in entries} for i in self.libs.values())
        # Readable mappings too: registered kernel names live in .rodata.
        snap = [[s, e, o, p] for s, e, o, _, p in dsc.parse_maps(text, executable=False)]
        if cuda and snap != st.snapshot:
            st.snapshot = snap
            ctx.write_meta({"type": "maps", "pid": pid, "ts": ctx.now_ns(), "entries": snap,
                            "env": dsc.rank_env(pid)})
        return new

    def _attach_mapped(self, ctx, pid: int, todo: dict) -> list:
        """Libraries new in pid's maps ((inode, path) -> api).  Each is opened by
        its plain path if that is the mapped inode, else through
        /proc/PID/root (the process may have a mount namespace of its own):
        both as the target's user, all of a scan in at most two batches."""
        items = list(todo.items())
        plain = dsc.open_libs([path for (_, path), _ in items], self.reader, resolve=False)
        out, elsewhere = [], []
        for ((inode, path), api), fd in zip(items, plain):
            if not isinstance(fd, OSError) and os.fstat(fd).st_ino == inode:
                self.mapped.add((inode, path))
                out.append(self._attach_opened(ctx, path, f"maps of pid {pid}", api, pid, fd))
                continue
            if not isinstance(fd, OSError):
                os.close(fd)
            elsewhere.append(((inode, path), api))
        there = dsc.open_libs([dsc.root_path(pid, path) for (_, path), _ in elsewhere], self.reader,
                              resolve=False) if elsewhere else []
        for ((inode, path), api), fd in zip(elsewhere, there):
            if not isinstance(fd, FileNotFoundError):  # else gone with its process: another may map it
                self.mapped.add((inode, path))
            out.append(self._attach_opened(ctx, dsc.root_path(pid, path), f"maps of pid {pid}", api, pid, fd))
        return out

    def _stats(self, ctx) -> dict:
        out = dict.fromkeys(STATS, 0)
        try:
            m = ctx.session.objects["cuda"].map("cuda_stats")
            for i, name in enumerate(STATS):
                raw = m.lookup(struct.pack("<I", i), 8 * ctx.session.ncpu)
                out[name] = int(np.frombuffer(raw, "<u8").sum()) if raw else 0
        except (BPFError, KeyError):
            pass
        return out


__all__ = ["CudaPlugin"]
