"""What the bundled Perfetto UI (v52) shows of Python stacks, in headless
Chromium: the flame graph of the recorded process's CPU samples, and the
`py` arg of a CUDA synchronization; in the Chrome JSON conversion, a CPU
sample (an instant event) with its stack.  Screenshots go to
$TIMELINE_SCREENSHOT_DIR (docs/img/) if set."""
import os
import tempfile
import time

import pytest

from helpers import REPO, require_root, timeline_cmd
from pystack_pythons import PYTHONS
from test_cuda_record import real_cudart
from test_view import Browser, Viewer, shoot

DEMO = os.path.join(REPO, "tests", "pystack_demo.py")
PYTHON = next((PYTHONS[n] for n in ("pyenv-3.12", "pyenv-3.11", "pyenv-3.13", "debian-3.11", "pyenv-3.10")
               if n in PYTHONS), None)


def line(text: str) -> int:
    return next(i for i, t in enumerate(open(DEMO), 1) if text in t)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    require_root()
    if PYTHON is None:
        pytest.skip("no supported CPython here")
    trace = str(tmp_path_factory.mktemp("pystack-view") / "demo.pftrace")
    cp = timeline_cmd("record", "-e", "sched,cuda,pystack", "--cuda-lib", real_cudart(), "-o", trace, "--keep-raw",
                      "--", PYTHON, DEMO, real_cudart())
    assert cp.returncode == 0, cp.stderr
    return trace


def open_flame_graph(browser, url: str) -> str:
    """Open the trace at 1600x1000; v52 selects the process's callstacks on load and shows the
    flame graph of its samples (drawn on a canvas: look at the screenshot).  The page's text."""
    browser.call("Emulation.setDeviceMetricsOverride", width=1600, height=1000, deviceScaleFactor=1,
                 mobile=False)
    browser.call("Page.navigate", url=url)
    txt = browser.wait_for_text(["CPU Profile Sample Flamegraph", "CPU Stack Samples"], 90)
    time.sleep(1.5)
    assert "Area Selection" in txt and "CPU Profile Sample Flamegraph" in txt, txt[-3000:]
    return txt


def press_enter(browser):
    for kind in ("keyDown", "keyUp"):
        browser.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                     **({"text": "\r"} if kind == "keyDown" else {}))


def find(browser, text):
    """Search the omnibox for text and select the first match."""
    browser.call("Runtime.evaluate", expression="document.querySelector('.pf-omnibox input').focus()")
    for kind in ("keyDown", "keyUp"):  # select what an earlier search left, so the text replaces it
        browser.call("Input.dispatchKeyEvent", type=kind, key="a", code="KeyA", modifiers=2)
    browser.call("Input.insertText", text=text)
    time.sleep(0.5)
    press_enter(browser)


def test_chrome_json_sample_in_the_ui(demo, tmp_path):
    """The bundled UI ignores stackFrames/sf; a sample instant shows its stack as the `py` arg."""
    trace = str(tmp_path / "demo.json")
    cv = timeline_cmd("convert", demo.replace(".pftrace", ".tlraw"), "-o", trace)
    assert cv.returncode == 0, cv.stderr
    v = Viewer(trace)
    browser = Browser(tempfile.mkdtemp(dir=tmp_path))
    try:
        browser.call("Emulation.setDeviceMetricsOverride", width=1600, height=1000, deviceScaleFactor=1,
                     mobile=False)
        browser.call("Page.navigate", url=v.url)
        browser.wait_for_text(["pystack_demo"], 90)
        time.sleep(1.5)
        want = f"pystack_demo.py:{line('x = train_step(x)')} main ← "
        for _ in range(3):  # a search made while a JSON trace's tracks still load can select nothing
            find(browser, "sample")
            txt = browser.wait_for_text(["Arguments", want], 20)
            if "Arguments" in txt:
                break
        # the first samples can fall in the interpreter's start-up (importlib
        # frames); Enter steps to the next match, in time order
        for _ in range(60):
            if want in txt:
                break
            press_enter(browser)
            txt = browser.wait_for_text(["Arguments", want], 2)
        assert want in txt and "sample" in txt, txt[-3000:]
        time.sleep(0.5)
        shoot(browser, tmp_path, "python-stacks-chrome-sample.png")
    finally:
        browser.close()
        v.stop()


def test_flame_graph_and_sync_stack_in_the_ui(demo, tmp_path):
    v = Viewer(demo)
    browser = Browser(tempfile.mkdtemp(dir=tmp_path))
    try:
        open_flame_graph(browser, v.url)
        shoot(browser, tmp_path, "python-stacks-flamegraph.png")

        # find a synchronization: its details carry the Python stack it was called from
        browser.call("Runtime.evaluate", expression="document.querySelector('.pf-omnibox input').focus()")
        browser.call("Input.insertText", text="cudaStreamSynchronize")
        time.sleep(0.5)
        press_enter(browser)
        want = (f"pystack_demo.py:{line('SYNC(None)  # loss.item()')} train_step \u2190 "
                f"pystack_demo.py:{line('x = train_step(x)')} main \u2190 ")
        txt = browser.wait_for_text(["cudaStreamSynchronize", want], 60)
        assert want in txt, txt[-3000:]
        browser.call("Runtime.evaluate", expression="""
            for (const e of document.querySelectorAll('*'))
                if (e.scrollHeight > e.clientHeight + 10 && e.innerText.includes('Arguments')
                    && getComputedStyle(e).overflowY !== 'visible')
                    e.scrollTop = e.scrollHeight;""")
        time.sleep(0.5)
        shoot(browser, tmp_path, "python-stacks-sync-arg.png")
    finally:
        browser.close()
        v.stop()
