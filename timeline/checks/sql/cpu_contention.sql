-- Time the dispatcher (main training) thread spent runnable but not running,
-- its scheduling latency (length of each R/R+ interval) and switch rate.
-- Runnable intervals shorter than min_wait_us are ordinary wakeup latency
-- (an I/O-bound thread has thousands of them), not contention. With CUDA
-- calls, only the steady state counts (tl_steady: start-up and teardown have
-- their own patterns).
create or replace perfetto table _tl_cc_st as
select ts, dur, state, state in ('R', 'R+') and dur >= ${min_wait_us} * 1000 as waiting
from thread_state
where utid = (select utid from tl_main_thread) and dur > 0
  and ts >= coalesce((select ts from tl_steady), ts) and ts < coalesce((select end_ts from tl_steady), ts + 1);

-- The same for PyTorch's backward thread, which dispatches the backward
-- kernels: reported apart from the main thread.
create or replace perfetto table _tl_cc_bw as
select b.name, b.tid, min(s.ts) as ts, max(s.ts + s.dur) - min(s.ts) as span,
  sum(iif(s.state = 'Running', s.dur, 0)) as running,
  sum(iif(s.state in ('R', 'R+') and s.dur >= ${min_wait_us} * 1000, s.dur, 0)) as runnable,
  sum(iif(s.state in ('R', 'R+') and s.dur >= ${min_wait_us} * 1000, 1, 0)) as long_waits
from tl_backward_thread b join thread_state s on s.utid = b.utid
where s.dur > 0 and s.ts >= coalesce((select ts from tl_steady), s.ts)
  and s.ts < coalesce((select end_ts from tl_steady), s.ts + 1)
group by b.utid;

create or replace perfetto table _tl_cc_r as
select ts, dur from _tl_cc_st where state in ('R', 'R+');

create or replace perfetto table _tl_cc_pct as
select p50, p99 from _tl_percentiles!((select 0 as key, dur as val from _tl_cc_r));

create or replace perfetto table _tl_cc_span as
select min(ts) as ts, max(ts + dur) as end_ts from _tl_cc_st;

create or replace perfetto table _tl_cc_win as
select * from _tl_windows!(_tl_cc_span, cast(${window_s} * 1e9 as int));

drop table if exists _tl_cc_wj;
create virtual table _tl_cc_wj using span_join(_tl_cc_st, _tl_cc_win);

create or replace perfetto table _tl_cc as
select
  (select name from tl_main_thread) as thread, (select tid from tl_main_thread) as tid,
  coalesce((select sum(dur) from _tl_cc_st where state = 'Running'), 0) as running,
  coalesce((select sum(dur) from _tl_cc_st where waiting), 0) as runnable,
  (select count(*) from _tl_cc_st where waiting) as long_waits,
  (select count(*) from _tl_cc_r) as waits,
  (select p50 from _tl_cc_pct) as p50,
  (select p99 from _tl_cc_pct) as p99,
  (select count(*) from _tl_cc_st where state = 'Running') as switches,
  (select end_ts - ts from _tl_cc_span) as span,
  (select ts from _tl_cc_span) as span_ts;

-- Who held the CPUs while the dispatcher waited for one; only worked out when
-- the waiting is worth reporting (it is the most expensive step). Tasks the
-- recorder did not follow are one pseudo thread in no process ("outside the
-- recording", tid 4194304); idle CPUs hold nobody.
create or replace perfetto table _tl_cc_rwho as
select ts, dur from _tl_cc_st
where waiting and (select runnable >= ${warn_fraction} * (runnable + running)
                          and runnable >= ${min_wall_fraction} * span from _tl_cc);

drop table if exists _tl_cc_cj;
create virtual table _tl_cc_cj using span_join(_tl_cc_rwho, sched partitioned cpu);

create or replace perfetto table _tl_cc_who as
select group_concat(printf('%s %.2f s', who, busy / 1e9), ', ') as who from (
  select iif(t.upid is null, 'tasks outside the recording', printf('%s (tid %d)', coalesce(t.name, '?'), t.tid))
           as who, sum(j.dur) as busy
  from _tl_cc_cj j join thread t using (utid)
  where j.utid != 0 and j.utid != (select utid from tl_main_thread)
    and t.tid not in (0, 4194305)  -- idle: the idle task, or its pseudo thread in Chrome JSON
  group by 1 having busy >= 1e6 order by busy desc limit 3);

-- Switches per window: the window index is computed, not joined (a range
-- join against every window is quadratic on long traces).
create or replace perfetto table _tl_cc_storm as
select w.ts, w.dur, s.n, s.n * 1e9 / w.dur as rate
from (select (ts - (select ts from _tl_cc_span)) / _tl_window_step!(_tl_cc_span, cast(${window_s} * 1e9 as int))
             as win, count(*) as n
      from _tl_cc_st where state = 'Running' group by win) s
join _tl_cc_win w using (win)
-- A short window (the last one, or the whole span when a full ring kept only
-- the first tens of ms of a storm) gives a rate only from enough switches.
where w.dur >= 0.1e9 or s.n >= 1000
order by rate desc limit 1;

-- A thread that hardly runs can wait a large share of its little CPU time at
-- no cost: waiting must also be min_wall_fraction of its wall time, and a
-- p99 needs 100 samples to mean anything.
select
  case when runnable < ${min_wall_fraction} * span then iif(p99 >= ${p99_latency_ms} * 1e6 and waits >= 100,
                                                             'warning', 'ok')
       when runnable >= ${error_fraction} * (runnable + running) then 'error'
       when runnable >= ${warn_fraction} * (runnable + running) then 'warning'
       when p99 >= ${p99_latency_ms} * 1e6 and waits >= 100 then 'warning' else 'ok' end as severity,
  printf('dispatcher thread %s (tid %d) waited for a CPU %.0f%% of the time it wanted one (%.2f s in %,d '
         || 'waits of >= %g us, %.2f s running); scheduling latency p50 %.3f ms, p99 %.3f ms over %,d wakeups '
         || 'and preemptions', thread, tid, 100.0 * runnable / max(1, runnable + running), runnable / 1e9,
         long_waits, ${min_wait_us}, running / 1e9, coalesce(p50, 0) / 1e6, coalesce(p99, 0) / 1e6, waits)
    || coalesce('; the CPUs were meanwhile taken by ' || (select who from _tl_cc_who), '')
    -- (printf gives '0.00' for NULL, never NULL: test for the steady state itself)
    || iif(exists(select 1 from tl_steady),
           printf(' (steady state from +%.2f s: after start-up, to the last CUDA call)',
                  ((select ts from tl_steady) - trace_start()) / 1e9), '') as finding,
  span_ts as ts, span as dur, null as hint,
  round(1.0 * runnable / max(1, runnable + running), 4) as runnable_fraction,
  round(coalesce(p50, 0) / 1e6, 3) as latency_p50_ms,
  round(coalesce(p99, 0) / 1e6, 3) as latency_p99_ms,
  round(switches * 1e9 / max(1, span), 1) as switches_per_s
from _tl_cc where thread is not null and span > 0
union all
select
  case when runnable < ${min_wall_fraction} * span then 'ok'
       when runnable >= ${error_fraction} * (runnable + running) then 'error'
       when runnable >= ${warn_fraction} * (runnable + running) then 'warning' else 'ok' end,
  printf('backward thread %s (tid %d; PyTorch runs the backward pass and launches its kernels there) waited '
         || 'for a CPU %.0f%% of the time it wanted one (%.2f s in %,d waits of >= %g us, %.2f s running)',
         name, tid, 100.0 * runnable / max(1, runnable + running), runnable / 1e9, long_waits, ${min_wait_us},
         running / 1e9),
  ts, span, null, round(1.0 * runnable / max(1, runnable + running), 4), null, null, null
from _tl_cc_bw where span > 0
union all
select 'warning',
  printf('context-switch storm: the dispatcher switched %,d times in one %.1f s window (%,.0f/s)',
         n, dur / 1e9, rate),
  ts, dur,
  'the thread blocks and wakes constantly (tight producer/consumer hand-offs, contended locks, tiny '
    || 'queue reads); batch the hand-offs', null, null, null, round(rate, 1)
from _tl_cc_storm where rate >= ${storm_switches_per_s}
union all
select * from (
  select 'info',
    printf('worst window: waited for a CPU %.0f%% of the time it wanted one', 100.0 * r / (r + run)),
    ts, dur, null, round(1.0 * r / (r + run), 4), null, null, null
  from (select w.ts, w.dur, sum(iif(j.waiting, j.dur, 0)) as r, sum(iif(j.state = 'Running', j.dur, 0)) as run
        from _tl_cc_wj j join _tl_cc_win w using (win) group by win)
  where r + run > 0 and r >= ${warn_fraction} * (r + run)
    and (select runnable >= ${warn_fraction} * (runnable + running) and runnable >= ${min_wall_fraction} * span
         from _tl_cc)
  order by 1.0 * r / (r + run) desc limit 1)
union all
select 'info', printf('the dispatcher''s span of %.0f s would need %,d windows of %g s: they are %.0f s long '
                      || 'instead (%,d of them)', (end_ts - ts) / 1e9,
                      (end_ts - ts + cast(${window_s} * 1e9 as int) - 1) / cast(${window_s} * 1e9 as int),
                      ${window_s}, step / 1e9, (end_ts - ts + step - 1) / step),
  null, null, null, null, null, null, null
from (select *, _tl_window_step!(_tl_cc_span, cast(${window_s} * 1e9 as int)) as step from _tl_cc_span)
where step > cast(${window_s} * 1e9 as int)
union all
select 'n/a', 'no main training thread found (no process with scheduled threads)', null, null, null, null,
  null, null, null
where not exists(select 1 from tl_main_thread);
