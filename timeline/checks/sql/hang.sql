-- What each thread was stuck in when the trace ends (a --hang-timeout dump,
-- or any trace cut while the job was blocked): the traced CUDA/NCCL call
-- still open at the end (the recorder writes calls in flight as slices that
-- end at the dump), else the thread's last scheduler state when it is a
-- sleep (S) or uninterruptible wait (D), held for at least min_stuck_s.
-- "At the end" allows 200 ms: a dump ends a little after the calls in flight
-- were read.
create or replace perfetto table _tl_hang_end as
select max(e) as end_ts from (
  select max(ts + dur) as e from slice where dur > 0
  union all select max(ts + dur) from thread_state where dur > 0
  union all select max(ts) from thread_state);

-- the innermost traced call open at the end, per thread
create or replace perfetto table _tl_hang_call as
select utid, upid, fn, ts from (
  select c.utid, c.upid, c.fn, c.ts,
    row_number() over (partition by c.utid order by c.ts desc) as rn
  from _tl_cuda c, _tl_hang_end e
  where c.ts + c.dur >= e.end_ts - 200000000 and c.dur >= ${min_stuck_s} * 1e9)
where rn = 1;

-- the last state of every thread, when it is a wait that lasts to the end
create or replace perfetto table _tl_hang_state as
select utid, state, ts from (
  select s.utid, s.state, s.ts, s.dur,
    row_number() over (partition by s.utid order by s.ts desc) as rn
  from thread_state s where s.utid != 0)
where rn = 1 and state in ('S', 'D')
  and (dur < 0 or ts + dur >= (select end_ts from _tl_hang_end) - 200000000)
  and (select end_ts from _tl_hang_end) - ts >= ${min_stuck_s} * 1e9;

create or replace perfetto table _tl_hang as
select t.utid, t.tid, coalesce(t.name, '?') as thread, p.pid, coalesce(p.name, '?') as process,
  c.fn as call, coalesce(c.ts, s.ts) as since, s.state
from thread t left join process p using (upid)
left join _tl_hang_call c using (utid) left join _tl_hang_state s using (utid)
where t.tid != 0 and (c.fn is not null or s.state is not null);

select case when call is not null then 'error' else 'info' end as severity,
  printf('pid %d (%s), thread %s (tid %d): %s since +%.3f s, %.1f s before the trace ends',
         pid, process, thread, tid,
         case when call is not null then 'in ' || call
              when state = 'D' then 'in an uninterruptible wait (D)' else 'asleep (S)' end,
         (since - trace_start()) / 1e9, ((select end_ts from _tl_hang_end) - since) / 1e9) as finding,
  since as ts, (select end_ts from _tl_hang_end) - since as dur,
  pid, tid, thread, call, state
from _tl_hang
order by call is null, pid, since, tid;  -- (tid: equal ones by the trace's content, not row order)
