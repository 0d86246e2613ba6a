"""The tools read traces in child processes (`python -m timeline.mcp.worker`),
one per loaded trace, kept for the calls that follow: an agent asks many
questions of one trace, and loading a large one takes long.

Why processes: a query has a time limit, and neither engine can be stopped
cleanly from another thread of the server (the wasm engine's interrupt stops
every instance in the process; the native one is a subprocess of whoever
loaded the trace); a child can simply end.  It also keeps the engines'
memory (up to 4 GiB a trace) out of the long-lived server, and a crash of
an engine from ending it.  At most MAX_LOADED traces stay loaded (the least
recently used one goes first), each at most IDLE_S seconds unused; a trace
file that changed is loaded again.

The protocol, a JSON object a line: the server sends {"path": the resolved
trace or null (a worker for the diff job), "name", "engine", "tp_bin"}, the
worker answers {"ok": "loaded"} or {"error": ...}; then per call the server
sends {"job", "name", "args", "limit_s"} and the worker answers {"ok":
RESULT} or {"error": one line}.  A query past its limit_s ends the worker
after its answer says so ("ended": true).
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time

LOAD_LIMIT_S = 600     # the most loading a trace may take
JOB_LIMIT_S = 600      # ... and one call without a time limit of its own (a check on a huge trace)
GRACE_S = 30           # past a call's own limit the worker ends itself; this long after it, it is killed
MAX_ANSWER = 64 << 20  # bytes of JSON one call may send back
MAX_LOADED = 2         # traces kept loaded at once (each engine may hold GiBs)
IDLE_S = 300           # a loaded trace unused this long is let go


class WorkerError(Exception):
    """The job failed; the message is one line for the agent."""


# -- the server's side ------------------------------------------------------------

class Worker:
    """One child process, with one trace loaded (or none, for diff)."""

    def __init__(self, path, name, engine, tp_bin):
        self.path, self.identity = path, _identity(path)
        self.lock = threading.Lock()  # one call at a time
        self.used = time.monotonic()
        self._err = tempfile.TemporaryFile()  # the engine's messages; a pipe nobody reads would fill and block it
        self._buf = b""
        self.proc = subprocess.Popen([sys.executable, "-m", "timeline.mcp.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._err, start_new_session=True)
        try:
            self._exchange({"path": path, "name": name, "engine": engine, "tp_bin": tp_bin}, LOAD_LIMIT_S, "loading")
        except BaseException:
            self.close()
            raise

    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, job: str, name: str, args: dict, limit_s=None):
        self.used = time.monotonic()
        budget = limit_s + GRACE_S if limit_s else JOB_LIMIT_S
        try:
            return self._exchange({"job": job, "name": name, "args": args, "limit_s": limit_s}, budget, job)
        finally:
            self.used = time.monotonic()

    def _exchange(self, request: dict, budget: float, what: str):
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            raise WorkerError(f"{what} failed: {self._stderr_tail()}") from None
        line = self._line(time.monotonic() + budget, what)
        try:
            answer = json.loads(line)
        except ValueError:
            raise WorkerError(f"{what} failed: {self._stderr_tail()}") from None
        if answer.get("ended"):  # the worker stopped a query by ending itself
            self.close()
        if "error" in answer:
            raise WorkerError(answer["error"])
        return answer["ok"]

    def _line(self, deadline: float, what: str) -> bytes:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise WorkerError(f"{what} took longer than the {int(deadline - self.used)} s allowed and was stopped")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            data = os.read(fd, 1 << 20)
            if not data:
                return self._buf  # the worker ended: what it sent, if anything, is its last word
            self._buf += data
            if len(self._buf) > MAX_ANSWER:
                self.close()
                raise WorkerError(f"the answer is larger than {MAX_ANSWER >> 20} MiB: ask for fewer rows")
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _stderr_tail(self) -> str:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._err.seek(0)
        lines = self._err.read().decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else f"the worker ended (exit status {self.proc.returncode})"

    def close(self) -> None:
        """Ends the child: closing its stdin lets it close the engine (a native one is a process
        of its own); one that does not go at once is killed."""
        if self.alive():
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self._err):
            try:
                f.close()
            except OSError:
                pass


def _identity(path):
    """What says the file is the one loaded: a trace rewritten in place is loaded again."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class Workers:
    """The loaded traces, at most MAX_LOADED (more only while all are busy)."""

    def __init__(self, engine: str, tp_bin):
        self.engine, self.tp_bin = engine, tp_bin
        self._lock = threading.Lock()
        self._by_path: dict[str, Worker] = {}
        threading.Thread(target=self._reap, daemon=True, name="idle-traces").start()

    def run(self, job: str, path: str, name: str, args: dict, limit_s=None):
        """The job's result on the trace at `path` (resolved; `name`: as the agent gave it)."""
        while True:
            worker = self._worker(path, name)
            with worker.lock:
                if not worker.alive() or worker.identity != _identity(path):
                    self._drop(worker)
                    continue  # ended (a query's time limit) or the file changed: load it again
                try:
                    return worker.call(job, name, args, limit_s)
                finally:
                    if not worker.alive():
                        self._drop(worker)

    def run_alone(self, job: str, name: str, args: dict):
        """The job in a worker of its own, with no trace loaded (diff opens its two traces itself)."""
        worker = Worker(None, name, self.engine, self.tp_bin)
        try:
            return worker.call(job, name, args)
        finally:
            worker.close()

    def _worker(self, path: str, name: str) -> Worker:
        with self._lock:
            worker = self._by_path.get(path)
            if worker is not None:
                return worker
        fresh = Worker(path, name, self.engine, self.tp_bin)  # outside the lock: loading takes long
        with self._lock:
            if path in self._by_path:  # another call loaded it meanwhile
                extra, fresh = fresh, self._by_path[path]
            else:
                extra = None
                self._by_path[path] = fresh
                self._evict()
        if extra is not None:
            extra.close()
        return fresh

    def _evict(self) -> None:
        """Lets idle traces go, least recently used first, down to MAX_LOADED (lock held)."""
        for worker in sorted(self._by_path.values(), key=lambda w: w.used):
            if len(self._by_path) <= MAX_LOADED:
                return
            if worker.lock.acquire(blocking=False):
                try:
                    del self._by_path[worker.path]
                    worker.close()
                finally:
                    worker.lock.release()

    def _drop(self, worker: Worker) -> None:
        with self._lock:
            if self._by_path.get(worker.path) is worker:
                del self._by_path[worker.path]
        worker.close()

    def _reap(self) -> None:
        while True:
            time.sleep(min(IDLE_S, 30))
            with self._lock:
                idle = [w for w in self._by_path.values() if time.monotonic() - w.used > IDLE_S]
            for worker in idle:
                if worker.lock.acquire(blocking=False):
                    try:
                        self._drop(worker)
                    finally:
                        worker.lock.release()

    def close(self) -> None:
        with self._lock:
            workers, self._by_path = list(self._by_path.values()), {}
        for worker in workers:
            worker.close()


# -- the child's side ----------------------------------------------------------------

_ANSWERING = threading.Lock()  # one answer at a time: the query's, or the deadline's if it comes first


def _reply(obj, wait: bool = True) -> bool:
    """Writes one answer line, unless (wait=False) another is being written."""
    if not _ANSWERING.acquire(blocking=wait):
        return False
    try:
        sys.stdout.buffer.write(json.dumps(obj, default=_jsonable).encode() + b"\n")
        sys.stdout.flush()
    finally:
        _ANSWERING.release()
    return True


def _jsonable(v):
    if isinstance(v, (bytes, bytearray)):
        import base64

        return base64.b64encode(bytes(v)).decode()
    return str(v)


class _Deadline:
    """Ends this process when a query runs past its time limit: the answer
    says so, and a native engine (a process of its own session) is killed first."""

    def __init__(self, tp, seconds: float):
        self.tp, self.seconds = tp, seconds
        self.done = threading.Event()

    def __enter__(self):
        threading.Thread(target=self._watch, daemon=True, name="deadline").start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        _ANSWERING.acquire()  # the deadline's answer, if it fired, is out; the query's must not follow it
        _ANSWERING.release()

    def _watch(self):
        if self.done.wait(self.seconds):
            return
        if not _ANSWERING.acquire(blocking=False):
            return
        if self.done.is_set():  # the query finished meanwhile: its answer goes out
            _ANSWERING.release()
            return
        proc = getattr(self.tp, "_proc", None)
        if proc is not None:
            proc.kill()
        sys.stdout.buffer.write(json.dumps({"error": f"the query ran past its time limit of {self.seconds:g} s and "
                                                     "was stopped (narrow it, or give a larger timeout_s)",
                                            "ended": True}).encode()
                                + b"\n")
        sys.stdout.flush()
        os._exit(0)


def _one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return "; ".join(lines[:2]) or type(e).__name__


def _load(first: dict):
    """(trace processor, descriptor) of the trace the first request names."""
    from ..commands.query import load_or_fail, open_trace_fd
    from ..identity import invoking_user
    config = _config(first)
    fd = open_trace_fd(first["path"], invoking_user())  # as the invoking user in sudo mode
    try:
        return load_or_fail(first["name"], fd, config), fd
    except BaseException:
        os.close(fd)
        raise


def _config(first: dict):
    from ..trace_processor import TraceProcessorConfig

    return TraceProcessorConfig(engine=first["engine"], bin_path=first["tp_bin"], offline=True)


def _serve(tp, fd, path: str, config) -> None:
    from . import jobs

    for line in sys.stdin.buffer:
        req = json.loads(line)
        try:
            if req["job"] == "diff":
                result = jobs.diff(**req["args"], tp_config=config)
            elif tp is None:
                raise ValueError(f"no trace loaded for {req['job']}")
            elif req["limit_s"]:
                with _Deadline(tp, float(req["limit_s"])):
                    result = jobs.JOBS[req["job"]](tp, fd, path, req["name"], **req["args"])
            else:
                result = jobs.JOBS[req["job"]](tp, fd, path, req["name"], **req["args"])
        except _EXPECTED as e:
            _reply({"error": _one_line(e)})
            continue
        _reply({"ok": result})


def main() -> None:
    global _EXPECTED
    from ..errors import UserError
    from ..trace_processor import TraceProcessorError

    _EXPECTED = (UserError, TraceProcessorError, ValueError, TypeError)
    first = json.loads(sys.stdin.buffer.readline())
    tp = fd = None
    if first["path"] is not None:
        try:
            tp, fd = _load(first)
        except _EXPECTED as e:
            _reply({"error": _one_line(e)})
            return
    _reply({"ok": "loaded"})
    try:
        _serve(tp, fd, first["path"], _config(first))
    finally:  # stdin closed: the server let this trace go, or is gone
        if tp is not None:
            tp.close()
            os.close(fd)


_EXPECTED: tuple = ()

if __name__ == "__main__":
    main()
