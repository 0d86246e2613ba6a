"""What both converters share: a first pass over the raw log that builds the
process/thread model, and the normalised sched stream of the second pass.

Why two passes: trace_processor keeps one name per thread and one cmdline per
process, and the Perfetto UI wants them when a thread first appears.  Proc
records are few, so the first pass keeps them all (sched records are only
counted and their tracked tids collected); the second pass then streams the
sched records block by block with the final names already known, so memory
stays bounded by one block however long the log is.

Sched normalisation (the same for both outputs):
- the idle task stays tid 0 (swapper; trace_processor's utid 0, drawn as an
  empty CPU).  Any other untracked task is the one pseudo thread "outside the
  recording", tid OUTSIDE_TID: above PID_MAX_LIMIT so it never collides with a
  real tid, and in no process, so the Perfetto UI shows it as a single group
  after every process.  The recorder sees the switches involving tracked
  tasks, plus (TL_SF_LEFT_IDLE) the first one where a CPU that a recorded
  switch left idle starts an untracked task; so a CPU is idle from a switch to
  idle until that record or the next recorded switch, and "outside the
  recording" only where an untracked task really held it.  Between a switch
  to an untracked task and the next recorded switch the CPU may also have
  idled: that time stays "outside" (one record per recorded switch at most).
  Logs recorded before TL_SF_LEFT_IDLE existed lack those records: there an
  outside task that ran after an idle period shows as idle;
- per CPU, each switch's prev must be the previous switch's next (trace
  processor infers prev from that chain in compact sched).  Where the chain
  breaks (a record lost, a task that stopped being tracked at exit) a
  synthetic switch at the same timestamp bridges the gap;
- wakings are kept only for tracked woken threads.
"""
from __future__ import annotations

import dataclasses
import enum
import os
from typing import Callable, Iterator

import numpy as np

from .. import events as ev
from .. import proc_records, registry, sched_records
from ..rawlog import KIND_END, KIND_META, KIND_RING, Damage, RawLogReader
from .call_links import CallLinks

OUTSIDE_TID = 4194304  # PID_MAX_LIMIT on 64-bit: no real tid reaches it
OUTSIDE_COMM = "outside the recording"
IDLE_TID = 0
IDLE_COMM = "swapper"
# prev_state for synthetic switches (kernel >= 4.14 encoding, which every
# kernel with BPF ring buffers uses): R for "unknown, still runnable", X dead.
STATE_RUNNABLE = 0
STATE_DEAD = 0x10
EXIT_STATES = 0x30  # X (EXIT_DEAD) | Z (EXIT_ZOMBIE)
DEFAULT_PRIO = 120

Progress = Callable[[int, int], None] | None


@dataclasses.dataclass
class Thread:
    tid: int
    tgid: int | None = None
    name: str | None = None       # final name (last rename/exec)
    start_ts: int | None = None   # fork time, None if it predates the log
    end_ts: int | None = None     # exit time
    names: list = dataclasses.field(default_factory=list)  # [(ts, name)] over time

    def name_at(self, ts: int) -> str | None:
        """The name in effect at ts (None: unknown)."""
        cur = None
        for t, n in self.names:
            if t is None or t <= ts:
                cur = n
        return cur


@dataclasses.dataclass
class Process:
    pid: int
    ppid: int | None = None
    cmdline: list = dataclasses.field(default_factory=list)
    name: str | None = None       # comm of the main thread, final
    start_ts: int | None = None
    end_ts: int | None = None
    exit_code: int | None = None
    cmdline_is_comm: bool = False  # cmdline unknown: [comm] stands in
    history: list = dataclasses.field(default_factory=list)  # [(ts, cmdline, is_comm)]
    ranks: dict = dataclasses.field(default_factory=dict)  # {"rank": 3, ...} from its environment (ranks.py)

    def set_cmdline(self, ts: int | None, cmdline: list, is_comm: bool) -> None:
        self.cmdline, self.cmdline_is_comm = list(cmdline), is_comm
        self.history.append((ts, self.cmdline, is_comm))

    def cmdline_at(self, ts: int) -> tuple[list, bool]:
        """The cmdline as it was at ts (the earliest known one before that)."""
        best = self.history[0] if self.history else (None, self.cmdline, self.cmdline_is_comm)
        for h in self.history:
            if h[0] is not None and h[0] <= ts:
                best = h
        return best[1], best[2]


@dataclasses.dataclass
class LogModel:
    path: str
    size: int
    header: dict
    processes: dict = dataclasses.field(default_factory=dict)  # pid -> Process
    threads: dict = dataclasses.field(default_factory=dict)    # tid -> Thread
    tracked_tids: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    cpus: set = dataclasses.field(default_factory=set)
    n_switch: int = 0
    n_waking: int = 0
    # tid -> time of its final switch-out (prev_state X/Z): a thread keeps
    # running after its exit tracepoint while the kernel tears it down.
    final_switch: dict = dataclasses.field(default_factory=dict)
    families: list = dataclasses.field(default_factory=list)  # FamilyConverter instances
    n_proc: int = 0
    first_ts: int | None = None
    last_ts: int | None = None
    end: dict | None = None
    damage: Damage | None = None
    finalized: bool = False
    launched_pid: int | None = None  # launch mode: the recorded command's process
    # flows between families' slices (a call -> the GPU work it caused), see call_links.py
    call_links: CallLinks = dataclasses.field(default_factory=CallLinks)
    user: object = None  # sudo mode: the invoking user, whom files a family reads by name are opened as
    # (first ts, last ts, records) of each ring block: where the events lie in time (trace_set.py plans chunks by it)
    block_spans: list = dataclasses.field(default_factory=list)
    # the first record of a ring other than proc: a --ring dump keeps process records from before its window
    activity_ts: int | None = None

    @property
    def command_pid(self) -> int | None:
        """The recorded command's process: the one launched, or the --pid attached to."""
        if self.launched_pid is not None:
            return self.launched_pid
        pid = self.header.get("target_pid")
        return int(pid) if isinstance(pid, int) and pid in self.processes else None

    @property
    def drops(self) -> dict:
        """ring name -> records dropped (all CPUs); empty without an END block."""
        d = (self.end or {}).get("drops") or {}
        return {name: int(sum(v)) if isinstance(v, list) else int(v) for name, v in d.items()}

    def drops_per_cpu(self, cause: str | None = None) -> dict:
        """cpu -> records dropped on that CPU, all rings together: every
        loss, or those of one cause ("full", "refused") of END drop_causes.
        A log written before causes were recorded counts all as "full"."""
        end = self.end or {}
        causes = end.get("drop_causes")
        if cause is None or (causes is None and cause == "full"):
            per_ring = (end.get("drops") or {}).values()
        else:
            per_ring = [c.get(cause) for c in (causes or {}).values()]
        out: dict[int, int] = {}
        for v in per_ring:
            if isinstance(v, list):
                for cpu, n in enumerate(v):
                    out[cpu] = out.get(cpu, 0) + int(n)
        return out

    @property
    def refused(self) -> dict:
        """ring name -> (records the kernel refused with room left, the most
        bytes pending at a refusal, ring bytes); only rings with refusals."""
        out = {}
        for name, c in ((self.end or {}).get("drop_causes") or {}).items():
            n = int(sum(c.get("refused") or ()))
            if n:
                out[name] = (n, int(c.get("refused_max_pending", 0)), int(c.get("ring_bytes", 0)))
        return out

    @property
    def stop_ts(self) -> int | None:
        return (self.end or {}).get("stop_ts")

    def ncpu(self) -> int:
        n = int(self.header.get("ncpu") or 0)
        return max([n, *(c + 1 for c in self.cpus), len(self.drops_per_cpu())])

    def thread_name(self, tid: int) -> str:
        if tid == OUTSIDE_TID:
            return OUTSIDE_COMM
        if tid == IDLE_TID:
            return IDLE_COMM
        t = self.threads.get(tid)
        return (t.name if t and t.name else "")

    def lifetime(self, kind: str, ident: int) -> tuple[int | None, int | None]:
        """(fork, exit) time of the "process" or "thread" with this pid/tid,
        None where unknown (it predates the log, or outlives it)."""
        x = (self.processes if kind == "process" else self.threads).get(ident)
        return (x.start_ts, x.end_ts) if x else (None, None)

    def thread_tgid(self, tid: int) -> int | None:
        t = self.threads.get(tid)
        return t.tgid if t else None

    def end_ts(self) -> int:
        cands = [x for x in (self.last_ts, self.stop_ts, self.first_ts) if x is not None]
        return max(cands) if cands else int(self.header.get("clock", {}).get("boottime_ns", 0))

    def start_ts(self) -> int:
        if self.first_ts is not None:
            return self.first_ts
        return int(self.header.get("clock", {}).get("boottime_ns", 0))


# ---------------------------------------------------------------- first pass

def _decode(blk, ring_dtypes) -> np.ndarray | None:
    dt = ring_dtypes.get(blk.ring)
    if dt is None:
        return None
    return ev.decode_ring_bytes(blk.payload, dt)


RING_DTYPES = registry.RING_DTYPES
RINGS = registry.RINGS


def scan(path: str, progress: Progress = None, total: int | None = None, families_loader=None) -> LogModel:
    """First pass: header, snapshots, all proc records, sched counts and tids.

    families_loader(model) -> [FamilyConverter]: converters for the other
    rings and META types; they see their records here and are kept in
    model.families for the second pass.
    Raises rawlog.RawLogError for something that is not a raw log.
    """
    with RawLogReader(path) as rd:
        size = rd.size
        total = total or size
        m = LogModel(path=path, size=size, header=rd.header)
        m.call_links.read_ahead = lambda rings: rings_in_order(path, rings)
        m.families = families_loader(m) if families_loader else []
        first = _FirstPass(m)
        for blk in rd.blocks():
            first.block(blk)
            if progress:
                progress(blk.offset + len(blk.payload), total)
        m.damage = rd.damage
        m.finalized = rd.finalized
    first.finish()
    return m


def rings_in_order(path: str, rings: set) -> Iterator[tuple[int, np.ndarray]]:
    """(ring, records) of each non-empty block of these rings, in file order, stopping at damage
    (what pass 2 reads: call_links reads ahead of it)."""
    with RawLogReader(path) as rd:
        for blk in rd.blocks():
            if blk.kind == KIND_RING and blk.ring in rings:
                recs = _decode(blk, RING_DTYPES)
                if recs is not None and recs.size:
                    yield blk.ring, recs


class _FirstPass:
    """What scan collects from the blocks, then builds the model's processes and threads from."""

    def __init__(self, m: LogModel):
        self.m = m
        self.ring_fams = {r: f for f in m.families for r in f.rings}
        self.meta_fams: dict[str, list] = {}
        for f in m.families:
            for mt in f.metas:
                self.meta_fams.setdefault(mt, []).append(f)
        self.procs_parts: list[np.ndarray] = []
        self.tid_parts: list[np.ndarray] = []
        self.snapshots: list[dict] = []
        self.rank_metas: list[dict] = []

    def block(self, blk) -> None:
        if blk.kind == KIND_RING:
            self._ring(blk)
        elif blk.kind == KIND_META:
            self._meta(blk.json())
        elif blk.kind == KIND_END:
            self.m.end = blk.json()

    def _ring(self, blk) -> None:
        m = self.m
        recs = _decode(blk, RING_DTYPES)
        if recs is None or recs.size == 0:
            return
        names = recs.dtype.names
        # Rings a plugin writes (gpu: CUPTI records) time their records
        # by `start` and run on no CPU of ours.
        # each ring's own timestamp field (a ring a plugin writes may
        # time its records otherwise, and run on no CPU of ours)
        ts = recs[RINGS[blk.ring].ts_field]
        _note_ts(m, ts)
        m.block_spans.append((int(ts.min()), int(ts.max()), int(ts.size)))
        if blk.ring != proc_records.RING_PROC:
            m.activity_ts = int(ts.min()) if m.activity_ts is None else min(m.activity_ts, int(ts.min()))
        if "cpu" in names:
            m.cpus.update(np.unique(recs["cpu"]).tolist())
        if blk.ring in self.ring_fams:
            self.ring_fams[blk.ring].scan_ring(blk.ring, recs)
        elif blk.ring == proc_records.RING_PROC:
            self.procs_parts.append(recs)
        elif blk.ring == sched_records.RING_SCHED:
            self._sched(recs)

    def _sched(self, recs: np.ndarray) -> None:
        """Switch and waking counts, the tracked tids seen running, and each exiting thread's last switch."""
        m = self.m
        sw = recs["kind"] == sched_records.SCHED_SWITCH
        m.n_switch += int(sw.sum())
        m.n_waking += int((recs["kind"] == sched_records.SCHED_WAKING).sum())
        f = recs["flags"]
        prev = recs["tid"][sw & ((f & sched_records.SF_PREV_TRACKED) != 0)]
        nxt = recs["target_tid"][sw & ((f & sched_records.SF_NEXT_TRACKED) != 0)]
        self.tid_parts.append(np.unique(np.concatenate([prev, nxt])))
        fin = sw & ((f & sched_records.SF_PREV_TRACKED) != 0) & ((recs["arg"] & EXIT_STATES) != 0)
        for tid, ts in zip(recs["tid"][fin].tolist(), recs["ts"][fin].tolist()):
            m.final_switch[tid] = max(ts, m.final_switch.get(tid, 0))

    def _meta(self, meta: dict) -> None:
        if meta.get("type") == "procs":
            self.snapshots.append(meta)
        elif meta.get("type") == "ranks":
            self.rank_metas.append(meta)
        for f in self.meta_fams.get(meta.get("type"), ()):
            f.scan_meta(meta)

    def finish(self) -> None:
        """The process tree, ranks, threads' ends and the tracked tids, from what the blocks held."""
        m = self.m
        procs = np.concatenate(self.procs_parts) if self.procs_parts else np.zeros(0, proc_records.PROC_EVENT)
        procs = procs[np.argsort(procs["ts"], kind="stable")]
        m.n_proc = int(procs.size)
        _build_tree(m, self.snapshots, procs)
        _apply_ranks(m, self.rank_metas)
        for tid, ts in m.final_switch.items():
            th = m.threads.get(tid)
            if th is not None and th.end_ts is not None and ts > th.end_ts:
                th.end_ts = ts
        tids = set(m.threads)
        if self.tid_parts:
            tids.update(np.unique(np.concatenate(self.tid_parts)).tolist())
        for tid in tids:
            if tid not in m.threads:
                m.threads[tid] = Thread(tid)  # seen running, never named: tgid unknown
        m.tracked_tids = np.array(sorted(tids), dtype=np.int64)


def _apply_ranks(m: LogModel, metas: list[dict]) -> None:
    """Rank fields onto the processes; the log is untrusted, so only small ints
    under the known keys are kept.  A pid's last image wins."""
    from ..ranks import RANK_VARS
    for meta in metas:
        for r in meta.get("processes") or ():
            if not isinstance(r, dict):
                continue
            pid = r.get("pid")
            p = m.processes.get(pid) if isinstance(pid, int) else None
            if p is None:
                continue
            p.ranks = {k: v for k, v in r.items()
                       if k in RANK_VARS and type(v) is int and 0 <= v < 10 ** 9}


def _note_ts(m: LogModel, ts: np.ndarray) -> None:
    lo, hi = int(ts.min()), int(ts.max())
    m.first_ts = lo if m.first_ts is None else min(m.first_ts, lo)
    m.last_ts = hi if m.last_ts is None else max(m.last_ts, hi)


def _thread(m: LogModel, tid: int, tgid: int | None = None) -> Thread:
    t = m.threads.get(tid)
    if t is None:
        t = m.threads[tid] = Thread(tid, tgid)
    elif tgid is not None and t.tgid is None:
        t.tgid = tgid
    return t


def _process(m: LogModel, pid: int) -> Process:
    p = m.processes.get(pid)
    if p is None:
        p = m.processes[pid] = Process(pid)
    return p


def _set_name(t: Thread, ts: int | None, name: str) -> None:
    if name and name != t.name:
        t.name = name
        t.names.append((ts, name))


def _build_tree(m: LogModel, snapshots: list[dict], procs: np.ndarray) -> None:
    """Replay snapshots and proc records in time order into m.processes/threads."""
    items: list[tuple[int, int, object]] = []
    for snap in snapshots:
        items.append((int(snap.get("ts") or 0), 0, snap))
    for i in range(procs.size):
        items.append((int(procs["ts"][i]), 1, procs[i]))
    items.sort(key=lambda x: (x[0], x[1]))  # stable: file order within a ts
    for ts, what, obj in items:
        if what == 0:
            _apply_snapshot(m, ts, obj)
        else:
            _apply_proc(m, ts, obj)


def _apply_snapshot(m: LogModel, ts: int, snap: dict) -> None:
    for sp in snap.get("processes") or []:
        pid = int(sp["pid"])
        p = _process(m, pid)
        if sp.get("ppid") is not None and p.ppid is None:
            p.ppid = int(sp["ppid"])
        if sp.get("cmdline") and not p.cmdline:
            p.set_cmdline(ts, [str(a) for a in sp["cmdline"]], False)
        elif not p.cmdline and sp.get("comm"):
            p.set_cmdline(ts, [sp["comm"]], True)
        if sp.get("comm") and p.name is None:
            p.name = sp["comm"]
        threads = sp.get("threads") or [{"tid": pid, "comm": sp.get("comm")}]
        for st in threads:
            t = _thread(m, int(st["tid"]), pid)
            if t.name is None and st.get("comm"):
                _set_name(t, ts, st["comm"])


def _apply_proc(m: LogModel, ts: int, r) -> None:
    kind, flags = int(r["kind"]), int(r["flags"])
    tid, tgid = int(r["tid"]), int(r["tgid"])
    comm = ev.cstr(r["comm"])
    if kind == proc_records.PROC_FORK:
        child, ctgid = int(r["child_tid"]), int(r["child_tgid"])
        if flags & proc_records.PF_LAUNCHED and m.launched_pid is None:
            m.launched_pid = ctgid
        if not flags & proc_records.PF_LAUNCHED:  # the recorder itself is not tracked
            parent = _thread(m, tid, tgid)
            if parent.name is None:
                _set_name(parent, None, ev.cstr(r["old_comm"]))
        t = m.threads[child] = Thread(child, ctgid, start_ts=ts)  # a new task, even on tid reuse
        _set_name(t, ts, comm)
        if flags & proc_records.PF_THREAD or child != ctgid:
            _process(m, ctgid)
        else:
            pp = m.processes.get(tgid)
            p = m.processes[ctgid] = Process(ctgid, ppid=tgid, name=comm, start_ts=ts)
            if pp is not None and pp.cmdline:  # fork inherits the parent's argv
                p.set_cmdline(ts, pp.cmdline, pp.cmdline_is_comm)
            else:
                p.set_cmdline(ts, [comm], True)
    elif kind == proc_records.PROC_EXEC:
        old = int(r["child_tid"])
        if old and old != tid and old in m.threads:
            m.threads[old].end_ts = ts  # a non-leader exec took over the leader's tid
        t = _thread(m, tid, tgid)
        _set_name(t, ts, comm)
        p = _process(m, tgid)
        argv = proc_records.argv_of(r)
        p.set_cmdline(ts, argv or [comm], not argv)
        p.name = comm
    elif kind == proc_records.PROC_EXIT:
        t = _thread(m, tid, tgid)
        t.end_ts = ts
        if flags & proc_records.PF_GROUP_DEAD:
            p = _process(m, tgid)
            p.end_ts, p.exit_code = ts, int(r["exit_code"])
    elif kind == proc_records.PROC_RENAME:
        t = _thread(m, tid, tgid)
        if t.name is None:
            _set_name(t, None, ev.cstr(r["old_comm"]))
        _set_name(t, ts, comm)
        if tid == tgid:
            _process(m, tgid).name = comm


# --------------------------------------------------------------- second pass

@dataclasses.dataclass
class CpuSched:
    """One CPU's share of a sched block, normalised, in time order."""
    cpu: int
    sw_ts: np.ndarray      # int64
    sw_prev: np.ndarray    # int64 tid (IDLE_TID for idle, OUTSIDE_TID for other untracked)
    sw_next: np.ndarray
    sw_state: np.ndarray   # int64 prev_state, ftrace encoding
    sw_prio: np.ndarray    # int64 next prio
    wk_ts: np.ndarray
    wk_waker: np.ndarray
    wk_woken: np.ndarray
    wk_cpu: np.ndarray     # target cpu
    wk_prio: np.ndarray
    n_synthetic: int = 0


def _insert_switches(cols: tuple, at, values: tuple) -> list:
    """Synthetic switches inserted before positions `at` of the columns
    (prev, next, ts, state, prio)."""
    return [np.insert(c, at, v) for c, v in zip(cols, values)]


def _shown(tids: np.ndarray, tracked) -> np.ndarray:
    """The tid a switch/waking shows: the task itself if tracked, else idle
    (tid 0 stays 0) or the one "outside the recording" pseudo thread."""
    tids = tids.astype(np.int64)
    return np.where(tracked != 0, tids, np.where(tids == IDLE_TID, IDLE_TID, OUTSIDE_TID))


class SchedNormalizer:
    """Turns raw sched records into per-CPU CpuSched chunks (see module doc).

    leading=True adds a synthetic switch before each CPU's first one: trace
    processor drops the first compact switch per CPU (it has no prev), so the
    real first switch must not be first.  Text output carries prev explicitly
    and needs no such switch.
    """

    def __init__(self, model: LogModel, leading: bool):
        self.model = model
        self.leading = leading
        self.last_next: dict[int, int] = {}
        self.exit_ts = {t.tid: t.end_ts for t in model.threads.values() if t.end_ts is not None}
        self.synthetic = 0
        self.dropped_wakings = 0

    def chunks(self, recs: np.ndarray) -> list[CpuSched]:
        if recs.size == 0:
            return []
        order = np.argsort(recs["cpu"], kind="stable")
        recs = recs[order]
        cpus, starts = np.unique(recs["cpu"], return_index=True)
        bounds = list(starts[1:]) + [recs.size]
        out = []
        for cpu, s, e in zip(cpus.tolist(), starts.tolist(), bounds):
            out.append(self._cpu(cpu, recs[s:e]))
        return out

    def _cpu(self, cpu: int, r: np.ndarray) -> CpuSched:
        ts = r["ts"]
        if ts.size > 1 and np.any(ts[1:] < ts[:-1]):
            r = r[np.argsort(ts, kind="stable")]
        kind = r["kind"]
        sw = r[kind == sched_records.SCHED_SWITCH]
        wk = r[kind == sched_records.SCHED_WAKING]
        other = OUTSIDE_TID
        f = sw["flags"]
        prev = _shown(sw["tid"], f & sched_records.SF_PREV_TRACKED)
        nxt = _shown(sw["target_tid"], f & sched_records.SF_NEXT_TRACKED)
        sts = sw["ts"].astype(np.int64)
        state = sw["arg"].astype(np.int64)
        prio = sw["prio"].astype(np.int64)
        lead = 0
        if self.leading and cpu not in self.last_next and wk.size:
            # trace processor also skips wakings before a CPU's first compact
            # switch: lead with a synthetic one at the first waking instead.
            t0 = int(wk["ts"].min())
            if not sts.size or t0 < sts[0]:
                first_prev = int(prev[0]) if sts.size else other
                prev, nxt, sts, state, prio = _insert_switches((prev, nxt, sts, state, prio), 0,
                                                               (other, first_prev, t0, STATE_RUNNABLE, DEFAULT_PRIO))
                self.last_next[cpu] = other
                self.synthetic += 1
                lead = 1
        if sts.size:
            first = cpu not in self.last_next
            expected = np.empty_like(prev)
            expected[1:] = nxt[:-1]
            expected[0] = self.last_next.get(cpu, -1)
            brk = np.flatnonzero(prev != expected)
            if first and not self.leading:
                brk = brk[brk != 0]
            if brk.size:
                s_prev = expected[brk]
                s_ts = sts[brk]
                s_state = np.array([STATE_DEAD if self._dead(int(p), int(t)) else STATE_RUNNABLE
                                    for p, t in zip(s_prev, s_ts)], dtype=np.int64)
                s_prev = np.where(s_prev < 0, other, s_prev)
                prev, nxt, sts, state, prio = _insert_switches((prev, nxt, sts, state, prio), brk,
                                                               (s_prev, prev[brk], s_ts, s_state, DEFAULT_PRIO))
                self.synthetic += brk.size
            self.last_next[cpu] = int(nxt[-1])
        woken = wk["target_tid"].astype(np.int64)
        keep = np.isin(woken, self.model.tracked_tids)
        if not keep.all():
            self.dropped_wakings += int((~keep).sum())
            wk, woken = wk[keep], woken[keep]
        waker = wk["tid"].astype(np.int64)
        waker = _shown(waker, np.isin(waker, self.model.tracked_tids))
        return CpuSched(cpu, sts, prev, nxt, state, prio,
                        wk["ts"].astype(np.int64), waker, woken,
                        wk["arg"].astype(np.int64), wk["prio"].astype(np.int64),
                        (int(brk.size) if sts.size else 0) + lead)

    def _dead(self, tid: int, ts: int) -> bool:
        e = self.exit_ts.get(tid)
        return e is not None and e <= ts


class ItemKind(str, enum.Enum):
    """What an Item of the second pass carries (a member, not a bare string:
    the converter's dispatch cannot silently miss a misspelt kind)."""
    SCHED = "sched"  # sched ring records, per-CPU chunks
    PROC = "proc"    # proc ring records
    PROCS = "procs"  # a process-table snapshot meta
    RING = "ring"    # a family's ring records
    META = "meta"    # a family's meta


@dataclasses.dataclass
class Item:
    """One step of the second pass."""
    kind: ItemKind
    chunks: list | None = None  # sched: list[CpuSched]
    recs: np.ndarray | None = None  # proc: PROC_EVENT records in time order
    meta: dict | None = None   # procs snapshot
    nrec: int = 0              # raw records this item carries
    ring: int = 0              # "ring": which ring the records come from


def stream(model: LogModel, normalizer: SchedNormalizer, progress: Progress = None,
           done0: int = 0, total: int | None = None) -> Iterator[Item]:
    """Second pass: yields normalised items in file order, stopping at damage."""
    total = total or model.size
    family_rings = {r for f in model.families for r in f.rings}
    family_metas = {mt for f in model.families for mt in f.metas}
    with RawLogReader(model.path) as rd:
        for blk in rd.blocks():
            if blk.kind == KIND_RING:
                recs = _decode(blk, RING_DTYPES)
                if recs is not None and recs.size:
                    if blk.ring == sched_records.RING_SCHED:
                        yield Item(ItemKind.SCHED, chunks=normalizer.chunks(recs), nrec=int(recs.size))
                    elif blk.ring == proc_records.RING_PROC:
                        recs = recs[np.lexsort((recs["ts"], recs["cpu"]))]
                        yield Item(ItemKind.PROC, recs=recs, nrec=int(recs.size))
                    elif blk.ring in family_rings:
                        yield Item(ItemKind.RING, recs=recs, nrec=int(recs.size), ring=blk.ring)
            elif blk.kind == KIND_META:
                meta = blk.json()
                if meta.get("type") == "procs":
                    yield Item(ItemKind.PROCS, meta=meta)
                elif meta.get("type") in family_metas:
                    yield Item(ItemKind.META, meta=meta)
            if progress:
                progress(done0 + blk.offset + len(blk.payload), total)


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
