"""cgroup family parsing without root: mount table, /proc/PID/cgroup, control files, counter series."""
from timeline.memory import cgroups
from timeline.memory.convert_cgroup import series

MOUNTINFO = """\
30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu
31 25 0:27 / /sys/fs/cgroup/memory rw,relatime shared:10 - cgroup cgroup rw,memory
32 25 0:28 / /sys/fs/cgroup/unified rw,relatime shared:11 - cgroup2 cgroup2 rw
33 25 0:29 / /mnt/my\\040dir rw - tmpfs tmpfs rw
"""


def test_mounts_and_lines():
    m = cgroups.parse_mountinfo(MOUNTINFO)
    assert [(x.mountpoint, x.version, x.dev) for x in m] == [
        ("/sys/fs/cgroup/cpu", 1, (0, 26)), ("/sys/fs/cgroup/memory", 1, (0, 27)), ("/sys/fs/cgroup/unified", 2, (0, 28))]
    assert "cpu" in m[0].controllers and not m[2].controllers
    lines = cgroups.parse_proc_cgroup("9:name=systemd:/\n4:memory:/job/a\n2:cpu,cpuacct:/job\n0::/u\nbad\n")
    assert lines == [(("name=systemd",), "/"), (("memory",), "/job/a"), (("cpu", "cpuacct"), "/job"), ((), "/u")]
    assert cgroups.label(("cpu", "cpuacct"), "/job") == "cpu,cpuacct:/job" and cgroups.label((), "/u") == "/u"


def test_hostile_paths_are_refused():
    assert cgroups.components("/a/b/") == ["a", "b"]
    assert cgroups.components("/a/../../etc") is None and cgroups.components("/./x") is None


def test_control_files():
    assert cgroups.parse_file("cpu.stat", b"nr_periods 10\nnr_throttled 4\nthrottled_time 2500000\nx y\n") == {
        "cpu.nr_periods": 10, "cpu.nr_throttled": 4, "cpu.throttled_usec": 2500}
    assert cgroups.parse_file("memory.events", b"low 0\nhigh 7\nmax 1\noom 0\noom_kill 0\nsurprise 9\n") == {
        "memory.events.low": 0, "memory.events.high": 7, "memory.events.max": 1, "memory.events.oom": 0,
        "memory.events.oom_kill": 0}
    assert cgroups.parse_file("memory.oom_control", b"oom_kill_disable 0\nunder_oom 1\noom_kill 2\n") == {
        "memory.under_oom": 1, "memory.oom_kill": 2}
    assert cgroups.parse_file("memory.failcnt", b"42\n") == {"memory.failcnt": 42}
    assert cgroups.parse_file("io.pressure", b"some avg10=0.00 avg60=0 avg300=0 total=123\nfull avg10=0 total=7\n") \
        == {"io.pressure.some_usec": 123, "io.pressure.full_usec": 7}


def test_series_counts_from_the_first_sample_and_drops_flat_tracks():
    s = 1_000_000_000
    rows = [(0, {"cpu.nr_periods": 100, "cpu.nr_throttled": 50, "cpu.throttled_usec": 1000, "memory.failcnt": 3,
                 "memory.pressure.some_usec": 0}),
            (s, {"cpu.nr_periods": 110, "cpu.nr_throttled": 58, "cpu.throttled_usec": 401_000, "memory.failcnt": 3,
                 "memory.pressure.some_usec": 250_000})]
    out = series(rows)
    assert out["cpu.nr_throttled"] == [(0, 0), (s, 8)] and out["cpu.throttled_ms"] == [(0, 0), (s, 400)]
    assert out["cpu.throttled_pct"] == [(0, 0.0), (s, 80.0)]
    assert out["memory.pressure.some_pct"] == [(0, 0.0), (s, 25.0)]
    assert "memory.failcnt" not in out  # 3 before and after: nothing happened during the recording
