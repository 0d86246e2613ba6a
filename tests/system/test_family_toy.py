"""A family from outside the tree, as docs/architecture.md's worked example has it:
its own package (descriptor, dtype module, plugin, converter, hooks) and one
registry entry (TIMELINE_EXTRA_FAMILIES, the test-only way to add one), no
other file edited.  Record, convert, the capture-range cut, the check data,
doctor and the per-rank lines all see it.

Its records come from its plugin, not BPF (like the gpu family's), and are
timed by a field named `at`, not `ts`: the core asks the ring (Ring.ts_field).
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from timeline import events, registry
from helpers import REPO, require_root, timeline_cmd
from rawlog_factory import BOOT0, LogBuilder, end_block

# the highest free ring id: clear of the ids the tree's families take
RING_TOY = max(set(range(1, events.MAX_RINGS)) - set(registry.RINGS))
TOY_EVENT = np.dtype([("at", "<u8"), ("value", "<u8"), ("pid", "<u4"), ("kind", "<u4")])
TICK, REGISTER = 1, 2

PACKAGE = {
    "__init__.py": "",
    "records.py": f"""
        import enum
        import numpy as np
        RING_TOY = {RING_TOY}
        TICK, REGISTER = {TICK}, {REGISTER}
        class ToyKind(enum.IntEnum):
            toy_tick = TICK
            toy_register = REGISTER
        TOY_EVENT = np.dtype({TOY_EVENT.descr!r})
        """,
    "family.py": """
        from timeline.family import CaptureRange, CheckData, Family, RankCount, Ring
        from . import records
        TOY = Family(
            name="toy", help="toy ticks (a test family)",
            rings=(Ring(records.RING_TOY, records.TOY_EVENT, "tl_toy_event", records.ToyKind, ts_field="at"),),
            default_on=False,
            plugin="toyfam.plugin:ToyPlugin",
            converters=("toyfam.converter:ToyConverter",),
            header_fields=(("toy", dict),),
            capture_ranges=(CaptureRange("toy:", window="toyfam.window:window"),),
            always_keep="toyfam.window:always_keep",
            check_data=(CheckData("toy_ticks", "exists(select 1 from slice where category = 'toy')",
                                  "toy tick slices"),),
            rank_counts=(RankCount("toy ticks", records.RING_TOY, lambda r: r["kind"] == records.TICK, "pid"),),
            doctor="toyfam.doctor:ToyDoctor",
        )
        """,
    "plugin.py": """
        import numpy as np
        from timeline import events
        from timeline.recorder_plugins import RecorderPlugin
        from . import records
        class ToyPlugin(RecorderPlugin):
            family = "toy"
            def header(self):
                return {"toy": {"version": 1}}
            def _write(self, ctx, value):
                recs = np.zeros(1, records.TOY_EVENT)
                recs["at"], recs["value"], recs["kind"] = ctx.now_ns(), value, records.TICK
                recs["pid"] = ctx.target_pids[0]
                ctx.write_ring(records.RING_TOY, events.encode_ring_bytes(recs))
            def on_target(self, ctx):
                self._write(ctx, 1)
            def stop(self, ctx):
                self._write(ctx, 2)
        """,
    "converter.py": """
        from timeline.converters.families import FamilyConverter
        from . import records
        class ToyConverter(FamilyConverter):
            rings = (records.RING_TOY,)
            def emit_ring(self, sink, ring, recs):
                for at, value, pid, kind in recs[["at", "value", "pid", "kind"]].tolist():
                    name = "toy tick" if kind == records.TICK else "toy register"
                    sink.slice(at, 1000, pid, pid, name, "toy", {"value": value})
        """,
    "window.py": """
        from timeline import events
        from timeline.capture import field
        from timeline.rawlog import KIND_RING, RawLogReader
        from . import records
        def window(raw, name, value):
            '''toy:N: from the N-th tick to the next one.'''
            ticks = []
            with RawLogReader(raw, name) as rd:
                for blk in rd.blocks():
                    if blk.kind == KIND_RING and blk.ring == records.RING_TOY:
                        r = events.decode_ring_bytes(blk.payload, records.TOY_EVENT)
                        ticks += r["at"][r["kind"] == records.TICK].tolist()
            n = int(value.split(":")[1])
            if n + 1 >= len(ticks):
                return None, f"no toy tick {n}: the trace holds the whole recording"
            return (ticks[n], ticks[n + 1]), f"toy window {n}"
        def always_keep(ring, rows):
            if ring != records.RING_TOY:
                return None
            return field(rows, ring, "kind") == records.REGISTER
        """,
    "doctor.py": """
        from timeline.doctor_checks import Check, FamilyDoctor
        class ToyDoctor(FamilyDoctor):
            def environment(self, python):
                return [Check("toy device", True, "one toy")]
        """,
}


@pytest.fixture(scope="module")
def toy_env(tmp_path_factory):
    """The environment of a timeline that has the toy family: its package on
    the path, its descriptor in TIMELINE_EXTRA_FAMILIES."""
    root = tmp_path_factory.mktemp("toy")
    os.makedirs(root / "toyfam")
    for name, text in PACKAGE.items():
        (root / "toyfam" / name).write_text(textwrap.dedent(text))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUDO_")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), REPO, os.path.join(REPO, "tests")])
    env[registry.EXTRA_FAMILIES_VAR] = "toyfam.family:TOY"
    return env


def T(us: int) -> int:
    return BOOT0 + us * 1000


def toy_log(path, header_extra=None, ranked=False) -> str:
    """pid 1000 with switches at 150, 250, 350 us; the toy ring: a registration
    at 50 us, ticks at 100..400 us."""
    b = LogBuilder(ncpu=1)
    b.fork(T(10), 0, 999, 999, 1000, 1000, "timeline", "timeline", launched=True)
    b.exec(T(20), 0, 1000, "python3", ["python3", "train.py"])
    for us in (150, 250, 350):
        b.switch(T(us), 0, 1000, 0, prev_state=1, next_tracked=False)
    b.flush()
    toy = np.zeros(5, TOY_EVENT)
    toy["at"] = [T(50), T(100), T(200), T(300), T(400)]
    toy["kind"] = [REGISTER, TICK, TICK, TICK, TICK]
    toy["value"] = [0, 10, 20, 30, 40]
    toy["pid"] = 1000
    b.blocks.append(("ring", (RING_TOY, events.encode_ring_bytes(toy))))
    if ranked:
        b.blocks.append(("meta", {"type": "ranks", "ts": T(30), "processes": [
            {"pid": 1000, "rank": 0, "world_size": 2}, {"pid": 1001, "rank": 1, "world_size": 2}]}))
    b.header["rings"][str(RING_TOY)] = {"name": "toy", "record_size": TOY_EVENT.itemsize,
                                        "stride": events.ring_stride(TOY_EVENT)}
    b.header.update({"toy": {"version": 1}, **(header_extra or {})})
    return b.write(path, end_block(stop_ts=T(500)))


def chrome_events(path) -> tuple[list[dict], str]:
    """(the JSON trace's events, its ftrace text of sched records)."""
    with open(path) as f:
        doc = json.load(f)
    return doc["traceEvents"], doc.get("systemTraceEvents", "")


def toy_slices(evs) -> list[tuple[str, float, int]]:
    return sorted((e["name"], e["ts"], e["args"]["value"]) for e in evs if e.get("cat") == "toy")


def test_a_raw_log_with_toy_records_converts(toy_env, tmp_path):
    raw = toy_log(tmp_path / "t.tlraw")
    cp = timeline_cmd("convert", raw, "-o", str(tmp_path / "t.json"), env=toy_env)
    assert cp.returncode == 0, cp.stderr
    got = toy_slices(chrome_events(tmp_path / "t.json")[0])
    assert got == [("toy register", T(50) / 1000, 0)] + [("toy tick", T(us) / 1000, us // 10)
                                                         for us in (100, 200, 300, 400)]
    # without the family, the same log converts and has none of them
    plain = {k: v for k, v in toy_env.items() if k != registry.EXTRA_FAMILIES_VAR}
    cp = timeline_cmd("convert", raw, "-o", str(tmp_path / "plain.json"), env=plain)
    assert cp.returncode == 0 and toy_slices(chrome_events(tmp_path / "plain.json")[0]) == [], cp.stderr


def test_its_header_field_is_checked(toy_env, tmp_path):
    raw = toy_log(tmp_path / "bad.tlraw", {"toy": "not an object"})
    cp = timeline_cmd("convert", raw, "-o", str(tmp_path / "bad.json"), env=toy_env)
    assert cp.returncode == 2 and "header field 'toy' is malformed" in cp.stderr, cp.stderr


def test_its_capture_range_is_cut_at_conversion(toy_env, tmp_path):
    """toy:1 keeps [tick 1, tick 2): one tick, the sched switch inside, the
    registration (always kept) and the whole process tree."""
    raw = toy_log(tmp_path / "c.tlraw", {"capture_range": "toy:1"})
    cp = timeline_cmd("convert", raw, "-o", str(tmp_path / "c.json"), env=toy_env)
    assert cp.returncode == 0 and "timeline: toy window 1" in cp.stderr, cp.stderr
    evs, sched = chrome_events(tmp_path / "c.json")
    assert toy_slices(evs) == [("toy register", T(50) / 1000, 0), ("toy tick", T(200) / 1000, 20)]
    assert sched.count("sched_switch") == 1 and f"{T(250) / 1e9:.7f}" in sched, sched
    assert any(e.get("ph") == "M" and e.get("pid") == 1000 for e in evs)  # the process is named
    assert not [n for n in os.listdir(tmp_path) if "toy-cut" in n]  # the cut copy is gone
    # a window its family does not find: the whole recording, and why
    raw = toy_log(tmp_path / "w.tlraw", {"capture_range": "toy:9"})
    cp = timeline_cmd("convert", raw, "-o", str(tmp_path / "w.json"), env=toy_env)
    assert cp.returncode == 0 and "no toy tick 9" in cp.stderr, cp.stderr
    assert len(toy_slices(chrome_events(tmp_path / "w.json")[0])) == 5


def test_record_knows_its_name_options_and_capture_range(toy_env, tmp_path):
    cp = timeline_cmd("record", "--help", env=toy_env)
    assert "toy: toy ticks (a test family)" in " ".join(cp.stdout.split()), cp.stdout
    # under sudo the variable is ignored: root does not import what the user names
    cp = timeline_cmd("record", "--help", env=dict(toy_env, SUDO_UID="65534", SUDO_GID="65534"))
    assert cp.returncode == 0 and "cuda:" in cp.stdout and "toy:" not in cp.stdout, cp.stdout
    cp = timeline_cmd("record", "--capture-range", "bogus", "--", "true", env=toy_env)
    assert cp.returncode == 2 and "expected none, cudaProfilerApi, nvtx:NAME or toy:NAME" in cp.stderr, cp.stderr
    # the option is the cuda family's; its kinds are any family's
    cp = timeline_cmd("record", "-e", "sched,toy", "--capture-range", "toy:1", "-o", str(tmp_path / "x.json"),
                      "--", "true", env=toy_env)
    assert cp.returncode == 2 and "--capture-range toy:1 needs the cuda family (-e ...,cuda)" in cp.stderr, cp.stderr
    cp = timeline_cmd("record", "-e", "sched,cuda", "--capture-range", "toy:1", "-o", str(tmp_path / "x.json"),
                      "--", "true", env=toy_env)
    assert cp.returncode == 2 and "--capture-range toy:1 needs the toy family (-e ...,toy)" in cp.stderr, cp.stderr


CHECK_HOOKS = """
import sys
from timeline.checks.catalog import FAMILY_HELP
from timeline.checks.runner import detect_families
from timeline.commands.doctor import check_environment
from timeline.rank_summary import rank_lines
from timeline.trace_processor import open_trace
print(FAMILY_HELP["toy_ticks"])
with open_trace(sys.argv[2]) as tp:
    print(detect_families(tp))
print([c.name for c in check_environment(sys.executable)])
print(rank_lines(sys.argv[1], {})[0])
"""


def test_check_data_doctor_rows_and_rank_counts(toy_env, tmp_path):
    raw = toy_log(tmp_path / "r.tlraw", ranked=True)
    assert timeline_cmd("convert", raw, "-o", str(tmp_path / "r.json"), env=toy_env).returncode == 0
    cp = subprocess.run([sys.executable, "-c", CHECK_HOOKS, raw, str(tmp_path / "r.json")], capture_output=True,
                        text=True, env=toy_env, timeout=120)
    assert cp.returncode == 0, cp.stderr
    help_line, families, rows, rank0 = cp.stdout.strip().splitlines()
    assert help_line == "toy tick slices"
    assert "'toy_ticks': True" in families and "'sched': True" in families, families
    assert "'toy device'" in rows and rows.index("'CUDA runtime'") < rows.index("'toy device'"), rows
    assert rank0.startswith("rank 0/2 (pid 1000): CPU ") and rank0.endswith(", 0 CUDA/NCCL calls, 4 toy ticks")


def test_a_recording_has_its_records(toy_env, tmp_path):
    """Its plugin writes a tick when the target is known and one at the end."""
    require_root()
    out = str(tmp_path / "rec.json")
    cp = timeline_cmd("record", "--keep-raw", "-e", "sched,toy", "-o", out, "--", "sleep", "0.2", env=toy_env)
    assert cp.returncode == 0, cp.stderr
    ticks = [e for e in chrome_events(out)[0] if e.get("cat") == "toy"]
    assert [e["args"]["value"] for e in ticks] == [1, 2] and ticks[0]["ts"] < ticks[1]["ts"], ticks
    assert len({e["pid"] for e in ticks}) == 1
    from timeline.rawlog import RawLogReader
    with RawLogReader(out[: -len(".json")] + ".tlraw") as rd:
        assert rd.header["toy"] == {"version": 1} and rd.header["rings"][str(RING_TOY)]["name"] == "toy"
        assert "toy" in rd.header["events"]
