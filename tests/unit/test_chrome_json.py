"""Chrome JSON sched text: pinned against a plain per-line reference writer
(byte for byte) and against the Perfetto output of the same log (what
trace_processor makes of both)."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from rawlog_factory import LogBuilder, end_block, many_switches, scenario

from timeline.converters import convert
from timeline.converters.chrome import writer as chrome_json
from timeline.converters.model import OUTSIDE_TID

IDLE = OUTSIDE_TID + 1  # the idle task's pseudo thread in the text lines


class ReferenceWriter(chrome_json.ChromeJsonWriter):
    """The sched text written one f-string per line: slow and obviously right.

    Layout of a line (what the systrace line parser reads):
      "<comm:>16>-<tid:<7> (<tgid:5 or ----->) [<cpu:03>] <flags> <sec>.<ns:09>5: <event>: <args>"
    """

    def sched(self, chunks) -> None:
        if not hasattr(self, "_ref_prio"):
            self._ref_prio = {}
        for c in chunks:
            lines = []
            prev_prio = self._ref_prio.get(c.cpu, 120)
            for i in range(c.sw_ts.size):
                p, x = (IDLE if t == 0 else t for t in (int(c.sw_prev[i]), int(c.sw_next[i])))
                pr = int(c.sw_prio[i])
                lines.append(self._line(p, c.cpu, ".....", int(c.sw_ts[i]), "sched_switch",
                                        f"prev_comm={self._name(p)} prev_pid={p} prev_prio={prev_prio} "
                                        f"prev_state={chrome_json.state_str(int(c.sw_state[i]))} ==> "
                                        f"next_comm={self._name(x)} next_pid={x} next_prio={pr}"))
                prev_prio = pr
            self._ref_prio[c.cpu] = prev_prio
            for i in range(c.wk_ts.size):
                k, w = int(c.wk_woken[i]), int(c.wk_waker[i])
                lines.append(self._line(IDLE if w == 0 else w, c.cpu, "d..3.", int(c.wk_ts[i]), "sched_waking",
                                        f"comm={self._name(k)} pid={k} prio={int(c.wk_prio[i])} "
                                        f"target_cpu={int(c.wk_cpu[i]):03d}"))
            # time order per CPU; a switch before a waking at the same ns
            order = np.argsort(np.concatenate([c.sw_ts, c.wk_ts]), kind="stable")
            for i in order.tolist():
                self._wb((lines[i] + "\\n").encode())

    def _name(self, tid: int) -> str:
        name = "idle" if tid == IDLE else self.m.thread_name(tid) or "<...>"
        clean = "".join(ch if ch.isprintable() and ch not in " =" else "_" for ch in name)
        return chrome_json._jstr(clean)

    def _line(self, tid, cpu, flags, ts, event, args) -> str:
        tgid = self.m.thread_tgid(tid) if tid < OUTSIDE_TID else None
        tg = "-----" if tgid is None else f"{tgid:5d}"
        sec, ns = divmod(ts, 1_000_000_000)
        return f"{self._name(tid):>16}-{tid:<7d} ({tg}) [{cpu:03d}] {flags} {sec}.{ns:09d}5: {event}: {args}"


def _read(path) -> bytes:
    with (gzip.open if str(path).endswith(".gz") else open)(path, "rb") as f:
        return f.read()


def convert_both(raw, tmp_path, name="t.json"):
    """(new output, reference output) of one raw log, as bytes."""
    new, ref = tmp_path / ("new-" + name), tmp_path / ("ref-" + name)
    res = convert(str(raw), str(new))
    real = chrome_json.ChromeJsonWriter
    chrome_json.ChromeJsonWriter = ReferenceWriter  # convert() looks the class up at call time
    try:
        convert(str(raw), str(ref))
    finally:
        chrome_json.ChromeJsonWriter = real
    return _read(new), _read(ref), res


def text_lines(doc: bytes) -> list[bytes]:
    start = doc.index(b'"systemTraceEvents":"') + len(b'"systemTraceEvents":"')
    return doc[start:doc.index(b'",\n"traceEvents"')].split(b"\\n")


# ------------------------------------------------------------------ logs

def edge_log(path, wide_cpus: bool = True) -> str:
    """Everything that changes a line's width or spelling: odd and wide names,
    6/7-digit tids and tgids, a tid with no known tgid, RT/DL prios, state
    combinations, 4-digit CPUs and target CPUs, second counts of 0, 9 -> 10 and
    99999 -> 100000 inside one block, equal timestamps, broken switch chains,
    blocks holding several CPUs.  trace_processor refuses CPUs >= 1024:
    wide_cpus=False keeps below that."""
    ncpu = 1100 if wide_cpus else 1000
    b = LogBuilder(ncpu=ncpu, mode="attach", target_pid=123456)
    names = ["a b=c", 'quo"te\\back', "\u00fcn\u00efc\u00f8d\u00e9", "\u65e5\u672c\u8a9e\u30b9\u30ec",
             "tab\there", "a-name-longer-than-sixteen", "\U0001f525hot", "x"]
    tids = [123456, 123457, 1234567, 4194303, 98, 7, 65536, 999999]
    b.procs(5, [{"pid": 123456, "ppid": 1, "comm": names[0], "cmdline": ["prog", "--flag"],
                 "threads": [{"tid": t, "comm": n} for t, n in zip(tids, names)]}])
    rng = np.random.default_rng(7)
    cpus = [0, 1, 7, 99, 100, 1023, 1099] if wide_cpus else [0, 1, 7, 99, 100, 999]
    prios = [120, 120, 120, -1, 0, 99, 139, 100]
    states = [0, 1, 2, 0x100, 0x10, 0x20, 0x80, 0x3, 0x101, 0x40, 0x402]
    running = {c: None for c in cpus}
    t0s = [1_000, 9_999_990_000, 99_999_999_990_000, 123_456_789_012_345]
    for t0 in t0s:
        for step in range(60):
            ts = t0 + step * 997
            for c in rng.choice(cpus, 3, replace=False).tolist():
                nxt = int(rng.choice(tids + [5555555, 0]))  # untracked ones become idle (0) or "outside"
                prev = running[c] if rng.random() < 0.9 and running[c] is not None else int(rng.choice(tids))
                b.switch(ts, c, prev, nxt, prev_state=int(rng.choice(states)), prio=int(rng.choice(prios)),
                         prev_tracked=prev in tids, next_tracked=nxt in tids)
                running[c] = nxt
                if rng.random() < 0.5:
                    target_cpu = int(rng.choice([0, 5, 99, 100, ncpu - 1, 1500 if wide_cpus else 1]))
                    b.waking(ts, c, int(rng.choice(tids + [0])), int(rng.choice(tids + [4242])), target_cpu,
                             prio=int(rng.choice(prios)))
            if step % 17 == 16:
                b.flush()
        b.flush()
    b.switch(5555, 1, 555555, tids[2], prev_tracked=True)  # tracked, never named: tgid unknown
    return b.write(path, end_block(drops_sched=[0] * ncpu, drops_proc=[0] * ncpu, stop_ts=t0s[-1] + 10**9))


# ------------------------------------------------------------------ byte for byte

@pytest.mark.parametrize("log", ["scenario", "edge", "many"])
def test_same_bytes_as_reference(tmp_path, log):
    raw = tmp_path / "x.tlraw"
    if log == "scenario":
        scenario(raw)
    elif log == "edge":
        edge_log(raw)
    else:
        many_switches(raw, 50_000, ncpu=3, block=7000, threads=40)
    new, ref, res = convert_both(raw, tmp_path)
    lines = text_lines(ref)
    assert len(lines) > 10 and lines[-1] == b""
    if log == "edge":  # the log really has the odd cases
        text = b"\n".join(lines).decode()
        for want in ("[1023]", "target_cpu=1500", "target_cpu=005", "prev_prio=-1", "R+", "S|D",
                     " 0.0000010005:", " 9.", " 10.", " 99999.", " 100000.", "(-----)", "(123456)",
                     "-1234567 ", "a_b_c", "tab_here", "\U0001f525hot", "\\\\", "\u65e5", "outside_the_recording", '\\"'):
            assert want in text, want
    assert new == ref


def test_same_bytes_gzip(tmp_path):
    raw = scenario(tmp_path / "x.tlraw")
    new, ref, _ = convert_both(raw, tmp_path, "t.json.gz")
    assert new == ref and new.startswith(b'{"systemTraceEvents"')


# ------------------------------------------------------------------ the writer thread

def _writer_for(raw, f):
    from timeline.converters import model

    m = model.scan(str(raw))
    return chrome_json.ChromeJsonWriter(f, m), m


def test_write_error_reaches_the_caller(tmp_path):
    """Writes happen on a second thread; a failing one still fails the conversion."""
    raw = many_switches(tmp_path / "m.tlraw", 20_000, block=1000)
    from timeline.converters import model

    class Full:
        def __init__(self):
            self.writes = 0

        def write(self, b):
            self.writes += 1
            if self.writes > 3:
                raise OSError(28, "No space left on device")

    f = Full()
    w, m = _writer_for(raw, f)
    norm = model.SchedNormalizer(m, leading=False)
    with pytest.raises(OSError, match="No space"):
        w.begin()
        for item in model.stream(m, norm):
            if item.kind == "sched":
                w.sched(item.chunks)
        w.finish()
    assert f.writes == 4  # nothing written after the failure


def test_abandoned_writer_thread_ends(tmp_path):
    """A conversion stopped by an exception never reaches finish(): its thread
    must not outlive the writer."""
    import gc
    import io

    w, _ = _writer_for(scenario(tmp_path / "s.tlraw"), io.BytesIO())
    w.begin()
    thread = w._out._thread
    assert thread.is_alive()
    del w
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()
