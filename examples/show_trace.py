"""Print what a timeline trace holds, read back through trace_processor.

    python examples/show_trace.py demo.pftrace

Per process and thread: time running on a CPU, runnable (waiting for a
CPU), sleeping (S) and in uninterruptible wait (D), from the `thread_state`
table that trace_processor builds from the trace's scheduling data.
"""
import os
import sys

from timeline.trace_processor import open_trace

SQL = """
select p.pid, p.name as process, t.tid, t.name as thread,
  sum(case when ts.state = 'Running' then ts.dur else 0 end) / 1e6 as running_ms,
  sum(case when ts.state in ('R', 'R+') then ts.dur else 0 end) / 1e6 as runnable_ms,
  sum(case when ts.state = 'S' then ts.dur else 0 end) / 1e6 as sleeping_ms,
  sum(case when ts.state like 'D%' then ts.dur else 0 end) / 1e6 as disk_wait_ms
from thread_state ts join thread t using (utid) left join process p using (upid)
where t.upid is not null and t.tid != 0  -- not idle, not the "outside the recording" pseudo thread
group by t.utid order by p.pid, running_ms desc
"""


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "demo.pftrace"
    with open_trace(path) as tp:
        rows = tp.query(SQL).as_dicts()
        (n_sched,) = tp.query("select count(*) from sched").rows[0]
    print(f"{path}: {n_sched} scheduling slices, {len(rows)} threads")
    print(f"{'pid':>7} {'tid':>7}  {'process / thread':<34} {'running':>9} {'runnable':>9} {'sleeping':>9} {'D wait':>8}  (ms)")
    for r in rows:
        process = os.path.basename(r["process"] or "?")
        name = f"{process} / {r['thread'] or '?'}"
        print(f"{r['pid'] or 0:>7} {r['tid']:>7}  {name[:34]:<34} {r['running_ms']:>9.1f} {r['runnable_ms']:>9.1f} "
              f"{r['sleeping_ms']:>9.1f} {r['disk_wait_ms']:>8.1f}")


if __name__ == "__main__":
    main()
