"""Calls are linked to their GPU work in windows of time, ahead of pass 2 (issue 23): what the link
holds must not grow with the recording, and a record that comes late, within the window, must still
be linked.  A log laid out as the recorder writes it (per 5 ms: the cuda family's calls, then
CUPTI's records) is converted with a 50 ms window (a round every 12.5 ms) and with the default one
(longer than the log: linked at its end, as a whole): the same trace, but for the one kernel whose
record comes 200 ms late, which loses its flow and is counted; one 30 ms late keeps it.
"""
from __future__ import annotations

import numpy as np
import pytest

from rawlog_factory import end_block
from test_gpu_convert import GpuLog, us
from test_gpu_convert_stream import trace_rows
from timeline import events as ev
from timeline.converters import call_links, convert
from timeline.cuda import converter as cuda_converter
from timeline.cuda import records as cuda_records
from timeline.gpu import links as gpu_links
from timeline.gpu import records as R
from timeline.trace_processor import open_trace

LAUNCHES = 800           # one per ms
BIN_US = 5_000
WINDOW_NS = 50_000_000
LATE = {100: 30_000, 300: 200_000}  # launch number -> how late (us) CUPTI's records of it come
MARKER = "flows past the link window"


class TimedLog(GpuLog):
    def write_in_time(self, path, late_corr: dict) -> str:
        """Blocks per BIN_US of time: the calls, then the CUPTI records (the work of a correlation id
        in late_corr that many us later)."""
        b = self.builder()
        calls, gpu = np.concatenate(self.calls), np.concatenate(self.gpu)
        delay = np.array([late_corr.get(int(c), 0) * 1000 for c in gpu["correlation"]], np.int64)
        due = gpu["start"].astype(np.int64) + np.where(gpu["kind"] == R.API, 0, delay)
        t0 = us(0)
        last = int(max(calls["ts"].max(), due.max()))
        for lo in range(t0, last + 1, BIN_US * 1000):
            hi = lo + BIN_US * 1000
            c = calls[(calls["ts"] >= lo) & (calls["ts"] < hi)]
            g = gpu[(due >= lo) & (due < hi)]
            if c.size:
                b.blocks.append(("ring", (cuda_records.RING_CUDA, ev.encode_ring_bytes(c))))
            if g.size:
                b.blocks.append(("ring", (R.RING_GPU, ev.encode_ring_bytes(g))))
        return b.write(path, end=end_block(stop_ts=us(self.span_us + 100)))


def timed_log():
    g = TimedLog(span_us=LAUNCHES * 1000 + 400_000)
    k = g.string(1, "k")
    corr = {}
    for i in range(LAUNCHES):
        t = 10_000 + 1000 * i
        # every 50th: a call the cuda family did not probe (its slice is made from CUPTI's record)
        call = None if i % 50 == 49 else "cudaLaunchKernel"
        corr[i] = g.launch(call, us(t), 10_000, [(k, us(t + 20), us(t + 100))])
    return g, {corr[i]: d for i, d in LATE.items()}


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    g, late = timed_log()
    return g.write_in_time(tmp_path_factory.mktemp("window") / "timed.tlraw", late)


def small_window(monkeypatch):
    monkeypatch.setattr(call_links, "WINDOW_NS", WINDOW_NS)
    monkeypatch.setattr(call_links, "STEP_NS", WINDOW_NS // 4)


def test_late_work_within_window_still_linked(raw, tmp_path, monkeypatch):
    whole = str(tmp_path / "whole.pftrace")
    convert(raw, whole)
    small_window(monkeypatch)
    windowed = str(tmp_path / "windowed.pftrace")
    convert(raw, windowed)
    want, got = trace_rows(whole), trace_rows(windowed)
    kernel_ts = {i: us(10_000 + 1000 * i + 20) for i in LATE}
    flows_into = {r[3]: r for r in want["flows"]}
    assert len(want["flows"]) == LAUNCHES and all(flows_into[t][1] == "cudaLaunchKernel" for t in kernel_ts.values())
    # 30 ms late: linked; 200 ms late (past the 50 ms window): not, and nothing else changes
    assert sorted(got["flows"], key=repr) == sorted([r for r in want["flows"] if r[3] != kernel_ts[300]], key=repr)
    assert [r for r in got["slices"] if r[2] != MARKER] == want["slices"]
    assert not [r for r in want["slices"] if r[2] == MARKER]
    with open_trace(windowed, engine="wasm") as tp:
        args = dict(tp.query(f"""select a.key, a.int_value from slice s join args a using (arg_set_id)
                                  where s.name = '{MARKER}' and a.int_value is not null""").rows)
    # the late kernel had no API record in time; its launch's API record had no work in time
    assert args == {"debug.work_without_call": 1, "debug.calls_without_work": 1}, args


def test_link_state_stays_bounded(raw, tmp_path, monkeypatch):
    """What the link holds between rounds: calls, API and work records not settled, flows not written
    (the cuda family writing every 32 calls: its batches of 16k would hold this whole log's)."""
    small_window(monkeypatch)
    monkeypatch.setattr(cuda_converter, "BATCH", 32)
    held = {"calls": 0, "api": 0, "work": 0, "flows": 0, "rounds": 0}
    seen = {}
    real_round, real_init = call_links.CallLinks._round, gpu_links.WorkLinks.__init__

    def init(self, links, *a):
        real_init(self, links, *a)
        seen["work"] = self

    def counted(self, cut):
        w = seen["work"]
        for k, n in (("calls", sum(c[0].size for c in self._calls)), ("api", sum(a[0].size for a in w._api)),
                     ("work", sum(x[0].size for x in w._work)), ("flows", self._res_seq.size + w._flowing.size)):
            held[k] = max(held[k], n)
        held["rounds"] += 1
        real_round(self, cut)

    monkeypatch.setattr(gpu_links.WorkLinks, "__init__", init)
    monkeypatch.setattr(call_links.CallLinks, "_round", counted)
    convert(raw, str(tmp_path / "t.pftrace"))
    # a round every 12.5 ms of the 800 ms: each holds about the window and a step (~60 launches)
    assert held["rounds"] > 40, held
    assert max(held[k] for k in ("calls", "api", "work", "flows")) < LAUNCHES // 5, held
