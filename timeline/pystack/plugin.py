"""Recorder plugin of the `pystack` family.

- Each recorded process is looked at once per image (fork or exec, from
  ctx.processes): is it a CPython we can walk (interpreter.py)?  If so its
  layout goes into the py_procs map and BPF starts taking its stacks; a
  forked child gets its parent's entry in BPF at once (tl_py_fork).  A
  process whose interpreter is not mapped yet (the dynamic loader is still
  at work right after exec) is looked at again a few times.
- CUDA runtime, driver and NCCL libraries get the tl_py_call uprobe on
  their synchronizing calls, collectives and launches (probes.py): the copies the target will likely load
  (the cuda family's discovery), --cuda-lib, and copies that show up in a
  Python process's mappings later (re-read when its VmLib changes).
- A thread of its own waits on the py_stacks ring (BPF wakes it for each new
  distinct stack) and reads the new code objects at once, while they live:
  batched process_vm_readv (symbolize.py), written to the raw log as META
  blocks with their line tables as CPython keeps them, so conversion needs
  no live process and the recorder decodes nothing.

Raw log META blocks written here:
  {"type": "py_stacks", "ts",
   "codes": [[code id, function, file, first line, table format (10|11), line table (base64)]...],
   "frames": [[index, code id, instruction byte offset]... or [index, function, file, line] (unnamed)],
   "stacks": [[pid, "stack id (hex)", flags, [frame index, innermost first]]...]}
  {"type": "py_procs", "ts", "processes": [{pid, path, version}]}
  {"type": "py_stats", "ts", walks, no_state, ..., call_hooks (stacks at calls taken through the
   cuda family's entry programs, not uprobes of our own)}
"""
from __future__ import annotations

import base64
import os
import select
import struct
import threading
import time

import numpy as np

from .. import safe_input
from ..cuda import discovery as dsc
from ..cuda.probes import DRIVER, NCCL, RUNTIME
from ..cuda.symbols import ElfSymbols
from ..libbpf import BPFError
from ..recorder_plugins import RecorderContext, RecorderPlugin
from ..registry import options_of
from ..ring_reader import RingReader
from . import attach, interpreter, probes
from . import records as R
from .memory import ProcessMemory
from .sampling import Sampler
from .symbolize import CodeReader

STATS = ("walks", "no_state", "no_frame", "truncated", "faults", "stacks", "stacks_lost", "waits",
         "short_waits", "walk_ns", "frames", "launches", "nested_launches", "timed_walks")  # pystack.bpf.c ST_*
# looks at a process whose interpreter is not mapped yet (the dynamic loader maps libpython
# within a millisecond or two of exec); a non-Python process costs these few reads
RETRY_S = (0.001, 0.003, 0.006, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64)
VMLIB_EVERY = 0.5     # s between VmLib checks of a Python process (a dlopen of libcudart changes it)
STATUS_LIMIT = 16384  # bytes of /proc/PID/status read
UNRESOLVED = "<unresolved>"
# Distinct stacks symbolized in a recording; past it new stacks keep their ids and
# samples but their frames are not read (a target making endless new stacks
# cannot make the recorder read its memory without end).
MAX_STACKS = 200_000
BPF_EXIST = 2
MAX_FRAME_IDS = 200_000  # (code, instruction, checksum) -> frame, per process; past it the map starts over
STACKS_WRITE_EVERY = 0.25  # s between py_stacks META blocks (stacks are named at once, written in batches)


class _Proc:
    __slots__ = ("gen", "interp", "reader", "tries", "next_try", "status_fd", "vmlib", "next_vmlib", "done",
                 "code_link")

    def __init__(self, gen: int):
        self.gen, self.interp, self.reader, self.code_link = gen, None, None, None
        self.tries, self.next_try, self.done = 0, 0.0, False
        self.status_fd, self.vmlib, self.next_vmlib = -1, None, 0.0

    def close(self) -> None:
        if self.status_fd >= 0:
            os.close(self.status_fd)
            self.status_fd = -1


class PyStackPlugin(RecorderPlugin):
    family = "pystack"

    def __init__(self, cfg, options):
        super().__init__(cfg, options)
        self.user = cfg.target_user  # whom the target runs as: its files are opened as them
        self.finder = interpreter.Finder(self.user)
        self.lock = threading.RLock()             # self.procs: consumer thread and stack thread
        self.procs: dict[int, _Proc] = {}
        self.live: dict[int, int] | None = None
        self.found: dict[int, dict] = {}          # walkable processes by pid, for the META and the summary
        self.unsupported: dict[str, dict] = {}    # why -> {pid: True}
        self.libs: set[tuple[int, int]] = set()   # (st_dev, inode) of libraries probed or found wanting
        self.mapped_libs: set[tuple[str, int]] = set()  # (maps device, inode) of libraries seen mapped
        self.lib_paths: list[str] = []
        self.lib_errors: list[str] = []
        self.frame_ids: dict[tuple, int] = {}      # (code id, instruction) or an unnamed frame -> index
        self.code_ids: dict[tuple, int] = {}       # code object content -> its id in the raw log
        self.gen = 0                              # py_procs entries written (their `gen`)
        self.dead_links: list = []                # code_dealloc links of processes gone: the stack thread closes
                                                  # them (a link's end waits for an RCU grace period)
        self.n_stacks = 0
        self._codes_out: list = []                # named, not written yet (stack thread)
        self._frames_out: list = []
        self._stacks_out: list = []
        self._next_write = 0.0
        self.n_unresolved = 0
        self.obj = None
        self.hooked = False
        self.reader: RingReader | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)  # _scan wakes the stack thread
        self._ctx: RecorderContext | None = None
        self.error: str | None = None
        self.sampler: Sampler | None = None
        self.sample_error: str | None = None
        # libraries probed: the driver's only for its launches
        self.apis = (RUNTIME, NCCL, DRIVER) if options.py_launch_every else (RUNTIME, NCCL)

    # -- hooks ----------------------------------------------------------------
    def header(self) -> dict:
        return {"pystack": {"probes": probes.table(), "max_frames": R.PY_MAX_FRAMES,
                            "sample_hz": self.options.py_sample_hz, "launch_every": self.options.py_launch_every}}

    def before_launch(self, ctx: RecorderContext) -> None:
        self._ctx = ctx
        self.obj = ctx.session.objects["pystack"]
        # TIMELINE_PYSTACK_NO_CHUNK=1: read each frame on its own (bench/pystack_cost.py compares)
        settings = struct.pack("<QII", self.options.py_wait_min_us * 1000,
                               int(os.environ.get("TIMELINE_PYSTACK_NO_CHUNK", "0") == "1"),
                               self.options.py_launch_every)
        self.obj.map("py_settings").update(struct.pack("<I", 0), settings)
        stacks = self.obj.map("py_stacks")
        self.reader = RingReader(stacks.fd, stacks.max_entries, R.PY_STACK)
        self._thread = threading.Thread(target=self._stack_loop, args=(stacks.fd,), name="timeline-pystack",
                                        daemon=True)
        self._thread.start()
        self.hooked = "cuda" in ctx.session.objects and self._hook_cuda(ctx.session.objects["cuda"])
        paths = list(options_of(self.cfg, "cuda").cuda_libs) if "cuda" in ctx.session.objects else []
        if self.cfg.command:
            paths += [p for p in dsc.candidates(self.cfg.command, os.environ.get("PATH"), self.user)
                      if dsc.lib_api(p) in self.apis]
        for p in paths:
            self._attach_lib(os.path.abspath(p))
        if self.options.py_sample_hz:
            self.sampler = Sampler(self.obj, self.options.py_sample_hz)
            self.sample_error = self.sampler.start()

    def on_target(self, ctx: RecorderContext) -> None:
        self._scan(ctx)

    def tick(self, ctx: RecorderContext) -> None:
        self._scan(ctx)

    def stop(self, ctx: RecorderContext) -> None:
        if self.sampler is not None:
            self.sampler.close()
        self._scan(ctx)
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join()
        self._drain_stacks()  # the last ones: their processes may be gone (then unresolved)
        self._write_stacks()
        if self.reader is not None:
            self.reader.close()
        with self.lock:
            for st in self.procs.values():
                st.close()
        os.close(self._wake_fd)
        stats = self._stats()
        ctx.write_meta({"type": "py_stats", "ts": ctx.now_ns(), **stats, "unresolved_frames": self.n_unresolved,
                        "call_hooks": self.hooked})
        self._summary(ctx, stats)

    # -- processes --------------------------------------------------------------
    # The consumer thread (tick) only notes new process images; the stack
    # thread looks at them, so a slow look (an ELF file parsed, a maps file
    # read as the user: a fork) never delays draining the rings.
    def _scan(self, ctx: RecorderContext) -> None:
        live = ctx.processes
        if live is self.live:
            return
        new = False
        with self.lock:
            self.live = live
            for pid in [p for p in self.procs if p not in live]:
                self._forget(pid)
            for pid, gen in live.items():
                st = self.procs.get(pid)
                if st is not None and st.gen == -1:  # looked at after its exec, before we knew its image
                    st.gen = gen
                elif st is None or st.gen != gen:
                    if st is not None:
                        self._forget(pid)
                    self.procs[pid] = _Proc(gen)
                    new = True
        if new:
            self._wake()

    def _wake(self) -> None:
        os.eventfd_write(self._wake_fd, 1)

    def _exec(self, pid: int) -> None:
        """Stack thread: BPF saw a recorded process exec; look at its new image now."""
        with self.lock:
            if pid in self.procs:
                self._forget(pid, bpf=False)  # BPF dropped the entry itself
            self.procs[pid] = _Proc(-1)
            self.found.pop(pid, None)  # its old image (the recorder's own fork, before it exec'd the command)

    def _due(self, now: float) -> float:
        """Stack thread: the looks that are due; returns when the next one is."""
        nxt = now + 0.2
        with self.lock:
            for pid, st in list(self.procs.items()):
                if not st.done:
                    if now >= st.next_try:
                        self._look(pid, st, now)
                    if not st.done:
                        nxt = min(nxt, st.next_try)
                elif st.interp is not None:
                    if now >= st.next_vmlib:
                        self._watch_libs(pid, st, now)
                    nxt = min(nxt, st.next_vmlib)
        return nxt

    def _forget(self, pid: int, bpf: bool = True) -> None:
        st = self.procs.pop(pid, None)
        if st is not None:
            st.close()
            if st.code_link is not None:
                self.dead_links.append(st.code_link)
                st.code_link = None
            if st.interp is not None and bpf:
                try:
                    self.obj.map("py_procs").delete(struct.pack("<I", pid))
                except BPFError:
                    pass

    def _look(self, pid: int, st: _Proc, now: float) -> None:
        """Is pid a walkable CPython?  Writes its py_procs entry if so."""
        maps = interpreter.read_maps(pid, self.user)
        if maps is None:  # gone (or not ours to read)
            st.done = True
            return
        try:
            it = self.finder.find(pid, maps)
        except interpreter.NotPython:
            st.tries += 1
            st.done = st.tries > len(RETRY_S)
            if not st.done:
                st.next_try = now + RETRY_S[st.tries - 1]
            return
        except interpreter.Unsupported as e:
            st.done = True
            self.unsupported.setdefault(str(e), {})[pid] = True  # looked at twice (exec, then listed): once
            return
        st.done = True
        st.interp = it
        st.reader = CodeReader(ProcessMemory(pid), it.layout, it.code_type)
        self.gen += 1
        try:  # walkable at once; the code cache once code_dealloc is probed (below)
            self.obj.map("py_procs").update(struct.pack("<I", pid), it.layout.bpf_config(it.runtime, self.gen, False))
        except (BPFError, ValueError) as e:
            self.unsupported.setdefault(f"{it.path}: {e}", {})[pid] = True
            st.interp = None
            return
        found = {"pid": pid, "path": it.path, "version": ".".join(map(str, it.version))}
        self.found[pid] = found  # a pid's last image (the launcher before its exec was one too)
        if self._ctx is not None:
            self._ctx.write_meta({"type": "py_procs", "ts": self._ctx.now_ns(), "processes": [found]})
        self._attach_maps(pid, maps)
        if self._probe_code_free(pid, st, it):
            try:
                self.obj.map("py_procs").update(struct.pack("<I", pid),  # BPF_EXIST: not if it exec'd since
                                                it.layout.bpf_config(it.runtime, self.gen, True), BPF_EXIST)
            except BPFError:
                pass
        st.next_vmlib = now + VMLIB_EVERY

    def _watch_libs(self, pid: int, st: _Proc, now: float) -> None:
        """A CUDA library dlopen()ed since we looked changes VmLib: look at the maps again."""
        st.next_vmlib = now + VMLIB_EVERY
        try:
            if st.status_fd < 0:
                st.status_fd = safe_input.open_input(f"/proc/{pid}/status", self.user)
            raw = safe_input.read_fd(st.status_fd, STATUS_LIMIT)
        except OSError:
            st.next_vmlib = float("inf")
            return
        i = raw.find(b"\nVmLib:")
        vmlib = raw[i + 7: raw.find(b"kB", i)].strip() if i >= 0 else b""
        if vmlib == st.vmlib:
            return
        first = st.vmlib is None
        st.vmlib = vmlib
        if not first:
            maps = interpreter.read_maps(pid, self.user)
            if maps is not None:
                self._attach_maps(pid, maps)

    def _probe_code_free(self, pid: int, st: _Proc, it) -> bool:
        """Probe code_dealloc of this interpreter's file for this process (attached now,
        filtered by pid).  Then BPF may cache its code objects' checksums."""
        if it.code_free is None:
            return False
        if st.code_link is None:
            fd = self._open_lib(dsc.root_path(pid, it.path), inode=it.file_key[1], resolve=False)
            if fd is None:
                return False
            try:  # on the file held open: a name swapped meanwhile changes nothing
                st.code_link = attach.code_free(self.obj, safe_input.fd_name(fd), it.code_free, pid)
            except BPFError:
                return False
            finally:
                os.close(fd)
        return True

    def _close_dead_links(self) -> None:
        with self.lock:
            dead, self.dead_links = self.dead_links, []
        for link in dead:
            link.destroy()
            try:
                self.obj.links.remove(link)
            except ValueError:
                pass

    # -- CUDA libraries -----------------------------------------------------------
    def _attach_maps(self, pid: int, maps) -> None:
        for m in maps:
            if dsc.lib_api(m.path) not in self.apis or (m.dev, m.inode) in self.mapped_libs:
                continue
            self.mapped_libs.add((m.dev, m.inode))
            # as the process sees it (its own mount namespace), and only the mapped file
            self._attach_lib(dsc.root_path(pid, m.path), inode=m.inode, resolve=False)

    def _open_lib(self, path: str, inode: int | None = None, resolve: bool = True) -> int | None:
        """A descriptor on the library, opened as the user the target runs as
        (dsc.open_libs: regular files only, no FIFO wait); None, noted, if not."""
        fd = dsc.open_libs([path], self.user, resolve=resolve)[0]
        if isinstance(fd, OSError):
            self.lib_errors.append(f"{path}: {fd.strerror}")
            return None
        if inode is not None and os.fstat(fd).st_ino != inode:  # not the file that was mapped
            os.close(fd)
            return None
        return fd

    def _hook_cuda(self, cuda_obj) -> bool:
        """Where the cuda family probes a call, its entry program runs tl_py_hook
        (a tail call through its program array, by probe id) and we attach no
        uprobe of our own: one consumer of the breakpoint, not two (~35 ns a
        call, docs/benchmarks.md).  False (our own uprobes then) if the array
        cannot take the program."""
        wanted = [p for p in probes.STACK_PROBES if self.options.py_launch_every or not p.launch]
        try:
            hooks = cuda_obj.map(attach.CALL_HOOKS)
        except BPFError:
            return False
        try:
            fd = attach.program_fd(self.obj, attach.HOOK)
            for p in wanted:
                key = struct.pack("<I", p.id)
                self.obj.map("py_hook_cookie").update(key, struct.pack("<I", probes.cookie(p)))
                hooks.update(key, struct.pack("<I", fd))
        except (BPFError, OSError) as e:
            for p in wanted:  # none half-hooked: those would take two stacks a call with our uprobes
                try:
                    hooks.delete(struct.pack("<I", p.id))
                except Exception:
                    pass
            self.lib_errors.append(f"cuda call hooks: {e}")
            return False
        return True

    def _attach_lib(self, path: str, inode: int | None = None, resolve: bool = True) -> None:
        fd = self._open_lib(path, inode, resolve)
        if fd is None:
            return
        try:
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            if key in self.libs:
                return
            self.libs.add(key)
            self._attach_lib_fd(path, fd)
        finally:
            os.close(fd)

    def _attach_lib_fd(self, path: str, fd: int) -> None:
        wanted = [p for p in probes.STACK_PROBES if self.options.py_launch_every or not p.launch]
        try:
            offsets = ElfSymbols(path, fd).exports(p.name for p in wanted)  # bounded read
        except Exception as e:  # not an ELF file we can read
            self.lib_errors.append(f"{path}: {e}")
            return
        plan, seen = [], set()
        for p in wanted:
            off = offsets.get(p.name)
            if off is not None and off not in seen:
                seen.add(off)
                plan.append((off, probes.cookie(p)))
        if not plan:
            return
        if self.hooked:
            self.lib_paths.append(path)
            return
        errors = attach.attach(self.obj, safe_input.fd_name(fd), plan)  # the file held, whatever `path` names now
        if errors and len(errors) == len(plan):
            self.lib_errors.append(f"{path}: {errors[0]}")
        else:
            self.lib_paths.append(path)

    # -- stacks ---------------------------------------------------------------------
    def _stack_loop(self, fd: int) -> None:
        ep = select.epoll()
        try:
            ep.register(fd, select.EPOLLIN)
            ep.register(self._wake_fd, select.EPOLLIN)
            timeout = 0.0
            while not self._stop.is_set():
                for f, _ in ep.poll(timeout):
                    if f == self._wake_fd:
                        os.eventfd_read(self._wake_fd)
                self._drain_stacks()
                if self.dead_links:
                    self._close_dead_links()
                now = time.monotonic()
                if now >= self._next_write:
                    self._write_stacks()
                    self._next_write = now + STACKS_WRITE_EVERY
                nxt = self._due(now)
                if self._stacks_out:
                    nxt = min(nxt, self._next_write)
                timeout = max(nxt - now, 0.0)
        except Exception as e:  # never the recording's end: said in the summary
            self.error = f"{type(e).__name__}: {e}"
        finally:
            ep.close()

    def _drain_stacks(self) -> None:
        data = self.reader.drain() if self.reader is not None else b""
        if not data:
            return
        n = len(data) // self.reader.stride
        recs = np.ndarray((n,), R.PY_STACK, buffer=data, offset=8, strides=(self.reader.stride,))
        new_frames, stacks = [], []
        with self.lock:
            # pass 1, in order (an exec starts a new image): each stack's reader,
            # and the code objects each reader must name
            todo, readers, wanted = [], {}, {}
            for rec in recs:
                pid = int(rec["tgid"])
                if rec["flags"] & R.PYF_EXEC:
                    self._exec(pid)
                    readers.pop(pid, None)
                    continue
                if pid not in readers:
                    readers[pid] = self._reader(pid)
                reader = readers[pid] if self.n_stacks + len(todo) < MAX_STACKS else None
                frames = rec["frames"][:min(int(rec["depth"]), R.PY_MAX_FRAMES)].tolist()
                todo.append((pid, rec, reader, frames))
                if reader is not None:
                    wanted.setdefault(id(reader), (reader, []))[1].extend((c, k) for c, _, k in frames)
            for reader, keys in wanted.values():  # a few batched reads per process, not ~10 per code object
                reader.resolve_many(keys)
            for pid, rec, reader, frames in todo:
                known = reader.frame_ids if reader is not None else {}  # (code, instr, check) -> frame
                ids = []
                for frame in frames:
                    idx = known.get(frame)
                    if idx is None:
                        idx = self._frame_id(reader, *frame, new_frames)
                    ids.append(idx)
                stacks.append([pid, f"{int(rec['stack_id']):x}", int(rec["flags"]), ids])
        self.n_stacks += len(stacks)
        self._frames_out += new_frames
        self._stacks_out += stacks

    def _frame_id(self, reader: CodeReader | None, code: int, instr: int, check: int, new_frames: list) -> int:
        """A frame's id in the raw log: (code object, instruction offset), the
        code object written once with its line table, which conversion decodes
        (decoding here cost more than reading them)."""
        info = reader.cache.get((code, check)) if reader is not None else None
        if info is None:
            self.n_unresolved += 1
            key = (UNRESOLVED, "", 0)
        else:
            if info.cid is None:
                content = (info.name, info.filename, info.firstlineno, info.minor, info.table)
                info.cid = self.code_ids.get(content)
                if info.cid is None:  # the same code in a forked worker is written once
                    info.cid = self.code_ids[content] = len(self.code_ids)
                    self._codes_out.append([info.cid, info.name, info.filename, info.firstlineno, info.minor,
                                            base64.b64encode(info.table).decode()])
            key = (info.cid, instr)
        idx = self.frame_ids.get(key)
        if idx is None:
            idx = self.frame_ids[key] = len(self.frame_ids)
            new_frames.append([idx, *key])
        if info is not None:  # unnamed frames are asked again: a later stack may read them
            if len(reader.frame_ids) >= MAX_FRAME_IDS:
                reader.frame_ids.clear()
            reader.frame_ids[(code, instr, check)] = idx
        return idx

    def _write_stacks(self) -> None:
        """The stacks named since the last write, as one META block (start-up
        makes hundreds of new stacks a second: one block each cost more than
        naming them)."""
        if self._ctx is not None and self._stacks_out:
            self._ctx.write_meta({"type": "py_stacks", "ts": self._ctx.now_ns(), "codes": self._codes_out,
                                  "frames": self._frames_out, "stacks": self._stacks_out})
        self._codes_out, self._frames_out, self._stacks_out = [], [], []

    def _reader(self, pid: int) -> CodeReader | None:
        st = self.procs.get(pid)
        if st is None:  # a forked child BPF walks already (its parent's entry)
            st = self.procs[pid] = _Proc(-1)
        if not st.done:  # look at it now: its code objects must be read while they live
            self._look(pid, st, time.monotonic())
        return st.reader

    # -- end ----------------------------------------------------------------------
    def _stats(self) -> dict:
        out = dict.fromkeys(STATS, 0)
        try:
            m = self.obj.map("py_stats")
            ncpu = self._ctx.session.ncpu
            for i, name in enumerate(STATS):
                raw = m.lookup(struct.pack("<I", i), 8 * ncpu)
                out[name] = int(np.frombuffer(raw, "<u8").sum()) if raw else 0
        except (BPFError, AttributeError):
            pass
        return out

    def _summary(self, ctx: RecorderContext, stats: dict) -> None:
        versions = sorted({f"{f['version']} ({os.path.basename(f['path'])})" for f in self.found.values()})
        if self.found:
            n = len(self.found)
            ctx.summary.append(f"pystack: {n} Python process{'es' if n > 1 else ''}, CPython {', '.join(versions)}: "
                               f"{self.n_stacks:,} distinct stacks from {stats['walks']:,} walks"
                               + (f", {self.n_unresolved:,} frames unresolved" if self.n_unresolved else ""))
        for why, seen in sorted(self.unsupported.items()):
            pids = list(seen)
            ctx.summary.append(f"pystack: no Python stacks for pid {', '.join(map(str, pids[:5]))}"
                               f"{' ...' if len(pids) > 5 else ''}: {why}")
        if self.n_stacks >= MAX_STACKS:
            ctx.summary.append(f"pystack: more than {MAX_STACKS:,} distinct stacks: the later ones were not named")
        if stats["stacks_lost"]:
            ctx.summary.append(f"pystack: {stats['stacks_lost']:,} new stacks found the stack ring full "
                               "(each was sent again when next taken)")
        for err in self.lib_errors[:3]:
            ctx.summary.append(f"pystack: warning: no stack probes on {err}")
        if self.error:
            ctx.summary.append(f"pystack: warning: symbolizing stopped: {self.error}")
        if self.sample_error:
            ctx.summary.append(f"pystack: warning: no CPU samples ({self.sample_error})")


__all__ = ["PyStackPlugin"]
