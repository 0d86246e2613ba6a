"""DataLoader roles from a synthetic raw log. The real torch training:
tests/system/test_dataloader.py.
"""
from timeline.trace_processor import open_trace


def q(tp, sql):
    return tp.query(sql).rows


def test_roles_from_a_synthetic_log(tmp_path):
    """Pin-memory threads need CUDA to exist: their mark is checked on a synthetic log."""
    from timeline.converters import convert
    from rawlog_factory import LogBuilder, T, end_block

    b = LogBuilder(ncpu=2)
    b.fork(T(10), 0, 999, 999, 1000, 1000, "timeline", "timeline", launched=True)
    b.exec(T(11), 0, 1000, "python3", ["python3", "train.py"])
    b.fork(T(20), 0, 1000, 1000, 1001, 1000, "python3", "python3", thread=True)
    b.rename(T(21), 0, 1001, 1000, "python3", "pt_data_pin")
    for i, pid in enumerate((1100, 1101)):
        b.fork(T(30 + i), 1, 1000, 1000, pid, pid, "python3", "python3")
        b.rename(T(40 + i), 1, pid, pid, "python3", "pt_data_worker")
    b.exit(T(90), 1, 1100, 1100, "pt_data_worker", group_dead=True)
    raw = b.write(tmp_path / "r.tlraw", end_block(stop_ts=T(100)))
    out = str(tmp_path / "r.pftrace")
    convert(raw, out)
    tp = open_trace(out)
    try:
        marks = q(tp, """select t.tid, s.name, extract_arg(s.arg_set_id, 'debug.role') from slice s
                         join thread_track tt on s.track_id = tt.id join thread t using (utid)
                         where s.cat = 'dataloader' order by t.tid""")
        assert marks == [(1000, "main training thread", "main_training_thread"),
                         (1001, "DataLoader pin_memory thread", "pin_memory_thread"),
                         (1100, "DataLoader worker 0", "dataloader_worker"),
                         (1101, "DataLoader worker 1", "dataloader_worker")]
        level = q(tp, """select c.value from counter c join process_counter_track t on c.track_id = t.id
                         where t.name = 'dataloader.workers' order by c.ts""")
        assert [v for (v,) in level] == [1, 2, 1]
    finally:
        tp.close()
