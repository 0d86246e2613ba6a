"""launch_latency and kernel_outliers name the launching Python line, on
SYNTHETIC traces: launches on one thread, each kernel on a GPU stream with a
flow from its launch (the gpu family's contract, as tests/unit/test_checks_gpu.py),
and, as the pystack family writes them when it takes stacks at launches
(1 launch in N), a `py` arg on some launch slices.  Planted: four slow
launches (two from model.py:12 forward, one from the loop, one without a
stack) and two slow kernels launched from model.py:40 attention.  Without the
`py` args the findings name no line.  A file name is the target's: its control
characters print escaped.
"""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from timeline.checks.report import render_text

from test_checks_gpu import GpuEvents
from test_query_check import PID, TID, report, result, sched_base, us

ARROW = " \u2190 "
LOOP = ARROW.join(["train.py:57 step", "train.py:90 main", "train.py:95 <module>"])
FORWARD = ARROW.join(["model.py:12 forward", "train.py:57 step", "train.py:90 main"])
ATTENTION = ARROW.join(["model.py:40 attention", "model.py:12 forward", "train.py:57 step"])
STEPS = 50
HOSTILE = ARROW.join(["evil\x1b[2J.py:7 run", "train.py:90 main"])
# step -> (duration in us, stack) of its slow launch; the worst three are listed one by one
SLOW_LAUNCHES = {30: (800, FORWARD), 31: (700, FORWARD), 32: (600, HOSTILE), 33: (500, None)}
SLOW_KERNELS = (40, 45)


def launch_trace(d, stacks: bool) -> str:
    d.mkdir()
    base = sched_base(d, 1_200_000)
    ev = GpuEvents()
    th = ev.track(pid=PID, tid=TID, thread_name="python3")
    stream = ev.track("GPU 0 \u00b7 stream 7", parent=ev.track("GPU 0"))
    t, corr = 2000.0, 0
    for step in range(STEPS):
        for i in range(10):
            corr += 1
            slow_launch = i == 3 and step in SLOW_LAUNCHES
            slow_kernel = i == 1 and step in SLOW_KERNELS
            dur, py = SLOW_LAUNCHES[step] if slow_launch else (5, ATTENTION if slow_kernel else
                                                               LOOP if corr % 4 == 0 else None)
            args = {"py": py} if stacks and py else {}
            ev.span(th, us(t), dur * 1000, "cudaLaunchKernel", "cuda", flow_out=corr, kernel=f"k{i % 5}", ret=0,
                    **args)
            ev.span(stream, us(t + dur + 2), (2000 if slow_kernel else 20) * 1000, f"k{i % 5}", "gpu_kernel",
                    flow_in=corr, device=0, stream=7, correlation_id=corr)
            t += dur + 2 + (2000 if slow_kernel else 20) + 5
        t += 500
    out = d / "trace.pftrace"
    out.write_bytes(base + ev.data())
    return str(out)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("launch_py")
    return {stacks: launch_trace(d / str(stacks), stacks) for stacks in (True, False)}


def findings(path, check):
    return result(path, "wasm", check).findings


def test_launch_latency_names_the_launching_line(traces):
    main, *worst = findings(traces[True], "launch_latency")
    assert main.severity in ("warning", "error") and main.evidence["outliers"] == len(SLOW_LAUNCHES)
    assert "; launched from model.py:12 forward (2 of the 3 outliers with a Python stack)" in main.message
    assert main.evidence["python_line"] == "model.py:12 forward" and main.evidence["python_share"] == 0.6667
    by_dur = sorted(worst, key=lambda f: -f.evidence["max_us"])
    assert [(f.evidence["max_us"], f.evidence.get("python_line")) for f in by_dur] == \
        [(800, "model.py:12 forward"), (700, "model.py:12 forward"), (600, "evil\x1b[2J.py:7 run")]
    assert all(f.message.endswith("; launched from " + f.evidence["python_line"]) for f in worst)


def test_text_output_escapes_the_file_name(traces):
    console = Console(file=io.StringIO(), width=300, force_terminal=False)
    render_text(report(traces[True], "wasm"), console)
    text = console.file.getvalue()
    assert "\x1b" not in text and "launched from evil\\x1b[2J.py:7 run" in text, text


def test_kernel_outliers_name_the_launching_line(traces):
    main, *worst = findings(traces[True], "kernel_outliers")
    assert main.evidence["kernel"] == "k1" and main.evidence["outliers"] == len(SLOW_KERNELS)
    assert "; launched from model.py:40 attention (2 of the 2 outliers with a Python stack)" in main.message
    assert main.evidence["python_line"] == "model.py:40 attention" and main.evidence["python_share"] == 1
    assert len(worst) == len(SLOW_KERNELS)
    assert all(f.message.endswith("; launched from model.py:40 attention") and
               f.evidence["python_line"] == "model.py:40 attention" for f in worst)


@pytest.mark.parametrize("check", ["launch_latency", "kernel_outliers"])
def test_without_stacks_the_findings_name_no_line(traces, check):
    with_py, without = findings(traces[True], check), findings(traces[False], check)
    assert [f.severity for f in with_py] == [f.severity for f in without]
    for a, b in zip(with_py, without):
        assert "launched from" not in b.message and "python_line" not in b.evidence
        assert a.message.split("; launched from")[0] == b.message  # the rest is as before
        assert {k: v for k, v in a.evidence.items() if not k.startswith("python_")} == b.evidence
