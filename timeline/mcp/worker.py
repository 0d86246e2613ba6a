"""Each tool call that reads a trace runs in a child process of its own
(`python -m timeline.mcp.worker`): the trace is loaded there, the answer
comes back as JSON on its stdout, and the process ends.

Why a process: a query has a time limit, and neither engine can be stopped
cleanly from another thread of the server (the wasm engine's interrupt stops
every instance in the process; the native one is a subprocess of whoever
loaded the trace); a child can simply end.  It also keeps the engine's
memory (up to 4 GiB a trace) out of the long-lived server, and a crash of
the engine from ending it.

The request on stdin: {"job": NAME, "path": the resolved trace, "name": the
path as the agent gave it, "args": {...}, "engine": ..., "tp_bin": ...,
"limit_s": seconds for the query itself or null}.  The answer on stdout:
{"ok": RESULT} or {"error": one line}.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

LOAD_LIMIT_S = 600     # the most one call may take with loading the trace (the server's own bound)
MAX_ANSWER = 64 << 20  # bytes of JSON one call may send back


class WorkerError(Exception):
    """The job failed; the message is one line for the agent."""


# -- the server's side ------------------------------------------------------------

def run_job(job: str, path: str, name: str, args: dict, engine: str, tp_bin, limit_s=None) -> dict:
    """The job's result, computed in a child process; WorkerError when it fails."""
    request = json.dumps({"job": job, "path": path, "name": name, "args": args, "engine": engine,
                          "tp_bin": tp_bin, "limit_s": limit_s})
    budget = LOAD_LIMIT_S + (limit_s or 0)
    # stderr: what the engine prints (and a traceback, should the worker break) stays out of the protocol
    proc = subprocess.Popen([sys.executable, "-m", "timeline.mcp.worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(request.encode(), timeout=budget)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise WorkerError(f"{job} took longer than {budget:.0f} s and was stopped") from None
    finally:
        if proc.poll() is None:  # the server is going away (an exception in communicate)
            proc.kill()
            proc.wait()
    if len(out) > MAX_ANSWER:
        raise WorkerError(f"the answer is larger than {MAX_ANSWER >> 20} MiB: ask for fewer rows")
    try:
        answer = json.loads(out)
    except ValueError:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        raise WorkerError(f"{job} failed: {tail[0]}") from None
    if "error" in answer:
        raise WorkerError(answer["error"])
    return answer["ok"]


# -- the child's side ----------------------------------------------------------------

_ANSWERING = threading.Lock()  # one answer: the query's, or the deadline's if it comes first


def _reply(obj, wait: bool = True) -> bool:
    """Writes the answer unless another thread is writing one (then False);
    the lock stays held: nothing may follow the answer."""
    if not _ANSWERING.acquire(blocking=wait):
        return False
    sys.stdout.buffer.write(json.dumps(obj, default=_jsonable).encode())
    sys.stdout.flush()
    return True


def _jsonable(v):
    if isinstance(v, (bytes, bytearray)):
        import base64

        return base64.b64encode(bytes(v)).decode()
    return str(v)


class _Deadline:
    """Ends this process when the query runs past its time limit: the answer
    says so, and a native engine (a process of its own session) is killed first."""

    def __init__(self, tp, seconds: float):
        self.tp, self.seconds = tp, seconds
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True, name="deadline")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()

    def _watch(self):
        if self.done.wait(self.seconds):
            return
        proc = getattr(self.tp, "_proc", None)
        if proc is not None:
            proc.kill()
        if _reply({"error": f"the query ran past its time limit of {self.seconds:g} s and was stopped "
                            "(narrow it, or give a larger timeout_s)"}, wait=False):
            os._exit(0)


def _run(req: dict):
    from ..commands.query import load_or_fail, open_trace_fd
    from ..identity import invoking_user
    from ..trace_processor import TraceProcessorConfig
    from . import jobs

    if req["job"] == "diff":
        return jobs.diff(req["path"], req["name"], **req["args"])
    job = jobs.JOBS[req["job"]]
    config = TraceProcessorConfig(engine=req["engine"], bin_path=req["tp_bin"], offline=True)
    user = invoking_user()
    fd = open_trace_fd(req["path"], user)
    try:
        tp = load_or_fail(req["name"], fd, config)
        try:
            if req["limit_s"]:
                with _Deadline(tp, float(req["limit_s"])):
                    return job(tp, fd, req, **req["args"])
            return job(tp, fd, req, **req["args"])
        finally:
            tp.close()
    finally:
        os.close(fd)


def main() -> None:
    from ..errors import UserError
    from ..trace_processor import TraceProcessorError

    req = json.loads(sys.stdin.buffer.read())
    try:
        result = _run(req)
    except (UserError, TraceProcessorError, ValueError) as e:
        lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
        _reply({"error": "; ".join(lines[:2]) or type(e).__name__})
        return
    _reply({"ok": result})


if __name__ == "__main__":
    main()
