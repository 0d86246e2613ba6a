"""Build synthetic raw logs for tests, the way the recorder lays them out."""
from __future__ import annotations

import numpy as np

from timeline import events as ev
from timeline import proc_records, sched_records
from timeline.rawlog import RawLogWriter

BOOT0 = 1_000_000_000_000  # boottime of the header clock snapshot, ns

UNAME = {"sysname": "Linux", "nodename": "testhost", "release": "6.8.0-45-generic",
         "version": "#45-Ubuntu SMP PREEMPT_DYNAMIC", "machine": "x86_64"}


def header(ncpu: int = 2, mode: str = "launch", target_pid: int = 1000, recorder_pid: int = 999,
           command=("python3", "train.py")) -> dict:
    return {
        "version": 1,
        "clock": {"boottime_ns": BOOT0, "realtime_ns": 1_700_000_000_000_000_000,
                  "monotonic_ns": BOOT0 - 5_000_000},
        "uname": dict(UNAME),
        "ncpu": ncpu,
        "rings": {str(rid): {"name": name, "record_size": dtype.itemsize, "stride": ev.ring_stride(dtype)}
                  for rid, name, dtype in ((sched_records.RING_SCHED, "sched", sched_records.SCHED_EVENT),
                                           (proc_records.RING_PROC, "proc", proc_records.PROC_EVENT))},
        "mode": mode,
        "command": list(command) if command and mode == "launch" else None,
        "target_pid": target_pid,
        "recorder_pid": recorder_pid,
        "events": ["sched", "proc"],
        "timeline_version": "0.1.0",
    }


class LogBuilder:
    """Collects records; flush() turns what is pending into RING blocks.

    Blocks are written in the order things were flushed, so a test can
    interleave CPUs the way the real ring buffer does.
    """

    def __init__(self, **hdr):
        self.header = header(**hdr)
        self.blocks: list[tuple[str, object]] = []  # ("ring", (ring, bytes)) | ("meta", dict)
        self._sched: list[tuple] = []
        self._proc: list[dict] = []

    # -- sched
    def switch(self, ts, cpu, prev, nxt, prev_state=0, prio=120, prev_tracked=True, next_tracked=True,
               left_idle=False):
        """left_idle: the recorder's one record of an idle CPU starting an untracked task."""
        flags = ((sched_records.SF_PREV_TRACKED if prev_tracked else 0)
                 | (sched_records.SF_NEXT_TRACKED if next_tracked else 0))
        if left_idle:
            assert prev == 0 and not prev_tracked and not next_tracked
            flags = sched_records.SF_LEFT_IDLE
        self._sched.append((ts, prev, nxt, prev_state, prio, cpu, sched_records.SCHED_SWITCH, flags))
        return self

    def waking(self, ts, cpu, waker, woken, target_cpu, prio=120, new=False):
        self._sched.append((ts, waker, woken, target_cpu, prio, cpu, sched_records.SCHED_WAKING,
                            sched_records.SF_WAKEUP_NEW if new else 0))
        return self

    # -- proc
    def _p(self, **kw):
        self._proc.append(kw)
        return self

    def fork(self, ts, cpu, parent, parent_tgid, child, child_tgid, comm, parent_comm,
             thread=False, launched=False):
        flags = (proc_records.PF_THREAD if thread else 0) | (proc_records.PF_LAUNCHED if launched else 0)
        return self._p(ts=ts, cpu=cpu, kind=proc_records.PROC_FORK, flags=flags, tid=parent, tgid=parent_tgid,
                       child_tid=child, child_tgid=child_tgid, comm=comm, old_comm=parent_comm)

    def exec(self, ts, cpu, pid, comm, argv, old_pid=None):
        data = b"".join(a.encode() + b"\0" for a in argv)[: proc_records.PROC_DATA_LEN]
        return self._p(ts=ts, cpu=cpu, kind=proc_records.PROC_EXEC, flags=0, tid=pid, tgid=pid,
                       child_tid=old_pid if old_pid is not None else pid, comm=comm, data=data)

    def exit(self, ts, cpu, tid, tgid, comm, code=0, group_dead=False):
        return self._p(ts=ts, cpu=cpu, kind=proc_records.PROC_EXIT,
                       flags=proc_records.PF_GROUP_DEAD if group_dead else 0,
                       tid=tid, tgid=tgid, exit_code=code, comm=comm)

    def rename(self, ts, cpu, tid, tgid, old, new):
        return self._p(ts=ts, cpu=cpu, kind=proc_records.PROC_RENAME, flags=0, tid=tid, tgid=tgid,
                       comm=new, old_comm=old)

    def procs(self, ts, processes):
        self.flush()
        self.blocks.append(("meta", {"type": "procs", "ts": ts, "processes": processes}))
        return self

    # -- blocks
    def flush(self):
        if self._sched:
            a = sched_array(self._sched)
            self.blocks.append(("ring", (sched_records.RING_SCHED, ev.encode_ring_bytes(a))))
            self._sched = []
        if self._proc:
            a = np.zeros(len(self._proc), proc_records.PROC_EVENT)
            for i, kw in enumerate(self._proc):
                for k, v in kw.items():
                    if k == "data":
                        raw = np.zeros(proc_records.PROC_DATA_LEN, np.uint8)
                        raw[: len(v)] = np.frombuffer(v, np.uint8)
                        a[i]["data"] = raw.tobytes()
                        a[i]["data_len"] = len(v)
                    elif k in ("comm", "old_comm"):
                        a[i][k] = v.encode()[:15]
                    else:
                        a[i][k] = v
            self.blocks.append(("ring", (proc_records.RING_PROC, ev.encode_ring_bytes(a))))
            self._proc = []
        return self

    def write(self, path, end: dict | None = None) -> str:
        """Write the log; `end` is the END! payload (None: recorder killed)."""
        self.flush()
        w = RawLogWriter(str(path), self.header)
        try:
            for kind, obj in self.blocks:
                if kind == "meta":
                    w.write_meta(obj)
                else:
                    w.write_ring(*obj)
            if end is not None:
                w.finish(end)
        finally:
            w.close()
        return str(path)


def sched_array(rows) -> np.ndarray:
    a = np.zeros(len(rows), sched_records.SCHED_EVENT)
    if rows:
        cols = list(zip(*rows))
        for name, col in zip(("ts", "tid", "target_tid", "arg", "prio", "cpu", "kind", "flags"), cols):
            a[name] = col
    return a


def end_block(drops_sched=(0, 0), drops_proc=(0, 0), stop_ts=None, exit_code=0, reason="target exited",
              drop_causes=None):
    """drop_causes: as BpfSession.drop_causes() writes it; None: a log from before causes were recorded."""
    end = {"drops": {"sched": list(drops_sched), "proc": list(drops_proc)},
           "clock_end": {"boottime_ns": stop_ts or BOOT0}, "exit_code": exit_code,
           "reason": reason, "stop_ts": stop_ts}
    if drop_causes is not None:
        end["drop_causes"] = drop_causes
    return end


def many_switches(path, n: int, ncpu: int = 4, block: int = 65536, threads: int = 16) -> str:
    """A log of n switches spread over ncpu CPUs (throughput tests)."""
    hdr = header(ncpu=ncpu)
    w = RawLogWriter(str(path), hdr)
    try:
        tids = 1000 + np.arange(threads)
        w.write_meta({"type": "procs", "ts": BOOT0, "processes": [
            {"pid": 1000, "ppid": 1, "comm": "python3", "cmdline": ["python3", "bench.py"],
             "threads": [{"tid": int(t), "comm": f"worker{i}"} for i, t in enumerate(tids)]}]})
        done = 0
        rng = np.random.default_rng(1)
        while done < n:
            k = min(block, n - done)
            a = np.zeros(k, sched_records.SCHED_EVENT)
            idx = np.arange(done, done + k)
            a["cpu"] = idx % ncpu
            a["ts"] = BOOT0 + 1000 + idx * 2000 + rng.integers(0, 900, k)
            a["kind"] = sched_records.SCHED_SWITCH
            # per cpu: alternate tracked thread -> idle -> tracked thread ...
            step = idx // ncpu
            t = tids[((step + 1) // 2 + idx % ncpu) % threads]  # keeps each CPU's chain intact
            running_other = step % 2 == 1
            a["tid"] = np.where(running_other, 0, t)
            a["target_tid"] = np.where(running_other, t, 0)
            a["flags"] = np.where(running_other, sched_records.SF_NEXT_TRACKED, sched_records.SF_PREV_TRACKED)
            a["arg"] = np.where(running_other, 0, 1)
            a["prio"] = 120
            w.write_ring(sched_records.RING_SCHED, ev.encode_ring_bytes(a))
            done += k
        w.finish(end_block(drops_sched=[0] * ncpu, drops_proc=[0] * ncpu,
                           stop_ts=int(BOOT0 + 1000 + n * 2000 + 1000)))
    finally:
        w.close()
    return str(path)


# ------------------------------------------------------------ scenario

def T(us: int) -> int:
    """Scenario time: us microseconds after BOOT0, plus a few odd nanoseconds
    so that converters have to keep full ns precision."""
    return BOOT0 + us * 1000 + us % 7


def scenario(path, end: bool = True) -> str:
    """The reference scenario tests/unit/test_converters.py checks in detail.

    Launch mode, 2 CPUs.  Process 1000 (python3 train.py --epochs 2, launched by
    recorder 999) with threads 1001 (renamed pt_data, then loader0) and 1002
    (pt_autograd, exits at T(400)); child process 1100 forked at T(200), exec
    /usr/bin/nvidia-smi -L, exits at T(300).  Switches on both CPUs with
    untracked tasks and idle (CPU 0 leaves idle for untracked task 88 at T(450),
    a TL_SF_LEFT_IDLE record), wakings (one of an untracked task), END block
    with drops sched [3, 0], proc [0, 1] unless end=False (recorder killed).
    """
    b = LogBuilder(ncpu=2)
    b.fork(T(10), 0, 999, 999, 1000, 1000, "timeline", "timeline", launched=True)
    b.switch(T(15), 0, 5, 1000, prev_state=1, prev_tracked=False)
    b.exec(T(20), 0, 1000, "python3", ["python3", "train.py", "--epochs", "2"])
    b.fork(T(30), 0, 1000, 1000, 1001, 1000, "python3", "python3", thread=True)
    b.fork(T(31), 0, 1000, 1000, 1002, 1000, "python3", "python3", thread=True)
    b.switch(T(35), 1, 0, 1001, prev_tracked=False)
    b.rename(T(40), 1, 1001, 1000, "python3", "pt_data")
    b.rename(T(45), 1, 1001, 1000, "pt_data", "loader0")
    b.rename(T(50), 0, 1002, 1000, "python3", "pt_autograd")
    b.switch(T(60), 0, 1000, 0, prev_state=1, next_tracked=False)
    b.waking(T(70), 0, 0, 1000, 0)
    b.switch(T(80), 0, 0, 1000, prev_tracked=False)
    b.switch(T(90), 1, 1001, 0, prev_state=1, next_tracked=False)
    b.waking(T(95), 1, 0, 1001, 1)
    b.flush()
    b.switch(T(100), 0, 1000, 1002, prev_state=0x100)
    b.switch(T(120), 1, 0, 1001, prev_tracked=False)
    b.switch(T(150), 0, 1002, 77, prev_state=2, next_tracked=False)
    b.waking(T(160), 0, 77, 1002, 0)
    b.switch(T(170), 0, 77, 1002, prev_tracked=False)
    b.switch(T(180), 0, 1002, 1000, prev_state=1)
    b.switch(T(190), 1, 1001, 0, prev_state=1, next_tracked=False)
    b.fork(T(200), 0, 1000, 1000, 1100, 1100, "python3", "python3")
    b.waking(T(205), 0, 1000, 1100, 1, new=True)
    b.switch(T(206), 1, 0, 1100, prev_tracked=False)
    b.exec(T(210), 1, 1100, "nvidia-smi", ["/usr/bin/nvidia-smi", "-L"])
    b.exit(T(300), 1, 1100, 1100, "nvidia-smi", code=0, group_dead=True)
    b.switch(T(301), 1, 1100, 0, prev_state=0x20, next_tracked=False)
    b.waking(T(350), 1, 0, 1001, 1)
    b.waking(T(351), 1, 0, 4242, 1)  # untracked woken: dropped
    b.flush()
    b.switch(T(360), 1, 0, 1001, prev_tracked=False)
    b.switch(T(390), 0, 1000, 1002, prev_state=1)
    b.exit(T(400), 0, 1002, 1000, "pt_autograd")
    b.switch(T(405), 0, 1002, 0, prev_state=0x10, next_tracked=False)
    b.switch(T(450), 0, 0, 88, next_tracked=False, prev_tracked=False, left_idle=True)
    b.switch(T(500), 0, 88, 1000, prev_tracked=False)
    b.switch(T(600), 0, 1000, 0, prev_state=1, next_tracked=False)
    b.switch(T(700), 1, 1001, 0, prev_state=2, next_tracked=False)
    return b.write(path, end_block(drops_sched=[3, 0], drops_proc=[0, 1], stop_ts=T(1000)) if end else None)
