"""sync_hotspots (sql/sync_hotspots.sql) as a partial computed at conversion.

Everything the SQL reads is a per-thread sum, min or max, so the collector holds no rows: per thread
its CUDA span (first call's start, last call's end, all CUDA categories: _tl_sh_span), per (thread,
label) of its synchronizing calls and blocking D2H copies the time, the calls and the scalar reads
(SQLite's three-valued `kind = 'D2H' and bytes <= small_copy_bytes`: how many true, how many not
NULL), per (thread, Python line) the time waited there, and what picks the main thread (the
recorder's markers; each thread's launch count and first launch). The set part holds the threads,
their labels and their 3 top lines; chunk parts are empty.

No partial (the SQL runs) without any CUDA call, above MAX_LINES (thread, line) pairs, where a thread
under 1% of its span waiting is listed or not by the main thread and the main thread is not certain
(a tie the SQL breaks by row order, or no marker and no launch: the prelude's process rules), for other
parameters than the defaults; none from the merge where two of a thread's labels tie on time (the
SQL's group_concat order), where two listed threads have one severity (their order is trace_processor's
utid order), or a listed thread has no name in the recording. Durations are as written (ends at
ts + max(dur, 0)): slices that cross on one thread (trace_processor closes the top one) are not
modelled.
"""
from __future__ import annotations

import numpy as np

from ...converters.interface import Column
from ..catalog import BY_ID
from ._gpu import CUDA_CATS, LAUNCHES, MAIN_CAT, MAIN_MARK, _fixed, _py_line, _round, _Strings, arg_codes, \
    fn_codes, made_with, marked_main

CHECK = "sync_hotspots"
VERSION = 1
MAX_LINES = 100_000   # (thread, Python line) pairs held
CALLS = ('cudaStreamSynchronize', 'cudaDeviceSynchronize', 'cudaEventSynchronize', 'cuStreamSynchronize',
         'cuCtxSynchronize', 'cuEventSynchronize', 'cudaMemcpy', 'cudaMemcpy2D', 'cuMemcpy', 'cuMemcpyDtoH',
         'cuMemcpyDtoH_v2')
COLUMNS = ("sync_fraction", "sync_calls", "scalar_reads", "python_line", "python_share")


def _cols(args, key: str) -> list:
    """Every column of that arg (ints as int64 and as uint64 come as two)."""
    return [c for c in args or () if isinstance(c, Column) and c.key == key]


class Collector:
    """Per-thread sums of the CUDA calls (the module doc)."""

    def __init__(self, pid_of=None):
        self.s = _Strings()
        self.pid_of = pid_of or (lambda tid: tid)
        self.model = None
        self.log_start = None
        self.small_bytes = BY_ID[CHECK].defaults()["small_copy_bytes"]
        self.span: dict[int, list] = {}     # tid -> [first call ts, last call end]
        self.fn: dict[tuple, list] = {}     # (tid, label code) -> [total, n, small true, small not NULL]
        self.lines: dict[tuple, int] = {}   # (tid, line code) -> ns waited
        self.launches: dict[int, list] = {}  # tid -> [launches, first launch ts]
        self.marks: list[tuple] = []
        self._line_of: dict[int, int] = {}  # py string code -> line code (-1: none)
        self.declined = ""

    def slice(self, ts, dur, tid, pid, name, cat, args=None, flow_out=None, flow_in=None) -> None:
        cols = [Column(k, "int" if isinstance(v, int) and not isinstance(v, bool) else "str",
                       np.array([v], np.int64) if isinstance(v, int) and not isinstance(v, bool)
                       else np.zeros(1, np.int64), None if isinstance(v, int) and not isinstance(v, bool)
                       else [str(v)]) for k, v in (args or {}).items() if v is not None]
        self.slices([ts], [dur], [tid], None if pid is None else [pid], name, cat, cols)

    def slices(self, ts, dur, tid, pid, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        ts = np.asarray(ts, np.int64).reshape(-1)
        n = ts.size
        if not n or self.declined:
            return
        cats = self.s.codes(cat, n)
        mark = cats == self.s.code(MAIN_CAT)
        if mark.any():
            m = mark & (self.s.codes(name, n) == self.s.code(MAIN_MARK))
            t, d = np.broadcast_to(np.asarray(tid, np.int64), (n,))[m], np.broadcast_to(np.asarray(dur, np.int64), (n,))[m]
            p = [None] * t.size if pid is None else np.broadcast_to(np.asarray(pid, np.int64), (n,))[m].tolist()
            for dd, tt, ti, pp in zip(d.tolist(), ts[m].tolist(), t.tolist(), p):
                self.marks.append((dd, tt, ti, int(pp if pp is not None else self.pid_of(ti) or ti)))
        cuda = np.isin(cats, [self.s.code(c) for c in CUDA_CATS])
        if not cuda.any():
            return
        idx = np.flatnonzero(cuda)
        ts = ts[idx]
        dur = np.maximum(np.broadcast_to(np.asarray(dur, np.int64), (n,))[idx], 0)  # the end packet's time
        tid = np.broadcast_to(np.asarray(tid, np.int64), (n,))[idx]
        fn = fn_codes(self.s, n, name)[idx]
        threads, inv = np.unique(tid, return_inverse=True)
        inv = inv.reshape(-1)
        lo = np.full(threads.size, np.iinfo(np.int64).max)
        hi = np.full(threads.size, np.iinfo(np.int64).min)
        np.minimum.at(lo, inv, ts)
        np.maximum.at(hi, inv, ts + dur)
        for t, a, b in zip(threads.tolist(), lo.tolist(), hi.tolist()):
            have = self.span.setdefault(t, [a, b])
            have[0], have[1] = min(have[0], a), max(have[1], b)
        launch = np.isin(fn, [self.s.code(x) for x in LAUNCHES])
        if launch.any():
            cnt = np.bincount(inv[launch], minlength=threads.size)
            first = np.full(threads.size, np.iinfo(np.int64).max)
            np.minimum.at(first, inv[launch], ts[launch])
            for t, k, f in zip(threads.tolist(), cnt.tolist(), first.tolist()):
                if k:
                    have = self.launches.setdefault(t, [0, f])
                    have[0], have[1] = have[0] + k, min(have[1], f)
        listed = np.isin(fn, [self.s.code(x) for x in CALLS])
        if listed.any():
            self._sync(idx, ts, dur, tid, fn, listed, args, n)

    def _sync(self, idx, ts, dur, tid, fn, listed, args, n) -> None:
        strings = self.s.strings
        d2h_fn = [c for c in np.unique(fn[listed]).tolist() if strings[c].startswith("cuMemcpyDtoH")]
        sync_fn = [c for c in np.unique(fn[listed]).tolist() if strings[c].endswith("ynchronize")]
        # kind: 'D2H' for cuMemcpyDtoH*, else the `kind` arg (NULL where absent)
        k_known, k_d2h = np.zeros(n, bool), np.zeros(n, bool)
        for c in _cols(args, "kind"):
            code = arg_codes(self.s, c, n)
            new = (code >= 0) & ~k_known
            k_d2h |= new & (code == self.s.code("D2H"))
            k_known |= new
        k_known, k_d2h = k_known[idx], k_d2h[idx]
        dfn = np.isin(fn, d2h_fn)
        k_known, k_d2h = k_known | dfn, k_d2h | dfn
        sync = listed & (np.isin(fn, sync_fn) | k_d2h)
        if not sync.any():
            return
        # bytes <= small_copy_bytes: NULL where absent; text (a hex arg) sorts above every number: false
        b_known, b_small = np.zeros(n, bool), np.zeros(n, bool)
        for c in _cols(args, "bytes"):
            have = (np.ones(n, bool) if c.present is None else np.asarray(c.present, bool)) & ~b_known
            if c.kind == "int":
                b_small |= have & (np.asarray(c.values) <= self.small_bytes)
            b_known |= have
        b_known, b_small = b_known[idx], b_small[idx]
        false = (k_known & ~k_d2h) | (b_known & ~b_small)
        true = k_known & k_d2h & b_known & b_small
        small_known = true | false
        label = fn.copy()
        for c in np.unique(fn[sync & k_d2h]).tolist():
            label[(fn == c) & k_d2h] = self.s.code(strings[c] + " D2H")
        py = np.full(n, -1, np.int64)
        for c in _cols(args, "py"):
            if c.kind == "str":
                code = self.s.codes(c, n)
                py = np.where(py < 0, code, py)
        py = py[idx]
        m = sync
        key_t, key_l = tid[m], label[m]
        pairs, inv = np.unique(np.stack([key_t, key_l]), axis=1, return_inverse=True)
        inv = inv.reshape(-1)
        sums = [np.bincount(inv, w, minlength=pairs.shape[1]).astype(np.int64) for w in (
            None, None, true[m], small_known[m])]
        tot = np.zeros(pairs.shape[1], np.int64)
        np.add.at(tot, inv, dur[m])  # exact ns (float sums could round)
        for j, (t, lab) in enumerate(pairs.T.tolist()):
            a = self.fn.setdefault((t, lab), [0, 0, 0, 0])
            a[0] += int(tot[j])
            a[1] += int(sums[1][j])
            a[2] += int(sums[2][j])
            a[3] += int(sums[3][j])
        withpy = m & (py >= 0)
        if not withpy.any():
            return
        for c in np.unique(py[withpy]).tolist():
            if c not in self._line_of:
                line = _py_line(strings[c])
                self._line_of[c] = -1 if line is None else self.s.code(line)
        uniq, pinv = np.unique(py[withpy], return_inverse=True)
        line = np.array([self._line_of[c] for c in uniq.tolist()], np.int64)[pinv.reshape(-1)]
        ok = line >= 0
        if not ok.any():
            return
        pairs, inv = np.unique(np.stack([tid[withpy][ok], line[ok]]), axis=1, return_inverse=True)
        tot = np.zeros(pairs.shape[1], np.int64)
        np.add.at(tot, inv.reshape(-1), dur[withpy][ok])
        for (t, ln), w in zip(pairs.T.tolist(), tot.tolist()):
            self.lines[(t, ln)] = self.lines.get((t, ln), 0) + w
        if len(self.lines) > MAX_LINES:
            self.declined = f"more than {MAX_LINES:,} Python lines"
            self.lines, self.fn = {}, {}

    def group_slices(self, ts, dur, name, cat, args=(), flow_out=None, flow_in=None) -> None:
        pass  # GPU work: not read

    def main_tid(self):
        """tl_main_thread's tid by the prelude's rules 1 and 2; None where not certain or not those."""
        if self.marks:
            picked = marked_main(self.marks)
            return None if picked is None else picked[0]
        if not self.launches:
            return None  # the training process' rules: not modelled
        top = max(k for k, _ in self.launches.values())
        firsts = sorted((f, t) for t, (k, f) in self.launches.items() if k == top)
        if len(firsts) > 1 and firsts[0][0] == firsts[1][0]:
            return None
        return firsts[0][1]

    def name(self, tid: int):
        t = self.model.threads.get(tid) if self.model is not None else None
        return t.name if t is not None and t.name else None


def part(cols: Collector, starts) -> dict | None:
    if cols.declined or not cols.span:
        return None  # (no CUDA call: the check's data is not recorded)
    strings = cols.s.strings
    threads: dict[int, dict] = {}
    for (t, lab), (total, n, small, known) in cols.fn.items():
        th = threads.setdefault(t, {"labels": [], "total": 0, "lines": []})
        th["labels"].append([strings[lab], total, n, small if known else None])
        th["total"] += total
    main = None
    for t, th in threads.items():
        lo, hi = cols.span[t]
        th["ts"], th["span"] = lo, hi - lo
        if th["span"] > 0 and not th["total"] >= 0.01 * th["span"]:
            main = cols.main_tid() if main is None else main
            if main is None:
                return None  # listed only if it is the main thread, which is not certain
    for (t, ln), w in cols.lines.items():
        threads[t]["lines"].append([strings[ln], w])
    out = []
    for t, th in sorted(threads.items()):
        if th["span"] <= 0 or not (th["total"] >= 0.01 * th["span"] or t == main):
            continue
        lines = sorted(th["lines"], key=lambda x: (-x[1], x[0]))
        out.append({"tid": t, "name": cols.name(t), "ts": th["ts"], "span": th["span"], "labels": th["labels"],
                    "top": lines[:3]})
    return {"set": {"version": VERSION, "params": BY_ID[CHECK].defaults(), "threads": out,
                    "any": bool(threads)},
            "chunks": [{} for _ in range(len(starts))]}


def merge(set_part: dict, chunk_parts: list, params: dict):
    if not made_with(set_part, VERSION, params):
        return None
    if not set_part["any"]:
        return [_row("ok", "no synchronizing CUDA calls (stream/device/event syncs, blocking D2H copies)",
                     sync_fraction=0, sync_calls=0, scalar_reads=0)]
    small_bytes = int(params["small_copy_bytes"])
    rows = []
    for th in set_part["threads"]:
        if th["name"] is None:
            return None
        labels = sorted(th["labels"], key=lambda x: -x[1])
        if any(a[1] == b[1] for a, b in zip(labels, labels[1:])):
            return None  # group_concat's order among equal times: the SQL's row order
        total = sum(x[1] for x in labels)
        n = sum(x[2] for x in labels)
        smalls = [x[3] for x in labels if x[3] is not None]
        small = sum(smalls) if smalls else None
        span = th["span"]
        parts = ", ".join(
            f"{lab} {_fixed(tot / 1e9, 3)} s ({k:,} calls"
            + (f", {s:,} of <= {small_bytes} B: scalar reads like .item()" if s is not None and s > 0 else "") + ")"
            for lab, tot, k, s in labels)
        sev = ("error" if total >= params["error_fraction"] * span else
               "warning" if total >= params["warn_fraction"] * span else "ok")
        text = (f"{th['name']} (tid {th['tid']}) spent {_fixed(100.0 * total / span, 0)}% of its CUDA span "
                f"({_fixed(total / 1e9, 2)} s of {_fixed(span / 1e9, 2)} s) waiting for the GPU: {parts}")
        line = share = None
        if total > 0 and th["top"]:
            text += "; called at " + ", ".join(f"{ln} ({_fixed(100.0 * w / total, 0)}%)" for ln, w in th["top"])
            line, share = th["top"][0][0], _round(1.0 * th["top"][0][1] / total, 4)
        hint = None
        if small is not None and small > 0 and small * 2 >= n:
            hint = ("most waits are tiny device-to-host copies: scalar reads (.item(), float(tensor), printing) "
                    "in the loop; accumulate on the GPU and read every N steps")
        rows.append(_row(sev, text, th["ts"], span, hint, sync_fraction=_round(1.0 * total / span, 4),
                         sync_calls=n, scalar_reads=small, python_line=line, python_share=share))
    sev = [r["severity"] for r in rows]
    if len(set(sev)) < len(sev):
        return None  # rows of one severity come in trace_processor's utid order
    return rows


def _row(severity, finding, ts=None, dur=None, hint=None, **evidence) -> dict:
    return {"severity": severity, "finding": finding, "ts": ts, "dur": dur, "hint": hint,
            **{c: evidence.get(c) for c in COLUMNS}}
