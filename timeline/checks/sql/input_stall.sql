-- The main training thread waiting for batches: its sleeps (S/D) that ended
-- with a wakeup from a DataLoader worker process or the pin-memory thread.
-- A sleep's waker is on the runnable state that follows it.
create or replace perfetto table _tl_is_providers as
select utid from thread
where upid in (select upid from _tl_workers) or name in ('pt_data_worker', 'pt_data_pin');

-- The workers' main threads run __getitem__; their state says why batches are slow.
create or replace perfetto table _tl_is_wmain as
select t.utid from thread t join process p using (upid)
where t.upid in (select upid from _tl_workers) and t.tid = p.pid;

-- The DataLoader's run: from the first worker event to the last one.
create or replace perfetto table _tl_is_span as
select min(ts) as ts, max(ts + dur) as end_ts from thread_state
where dur > 0 and utid in (select utid from thread where upid in (select upid from _tl_workers));

create or replace perfetto table _tl_is_wait as
select ts, dur from (
  select ts, dur, state, lead(waker_utid) over (order by ts) as woke_by
  from thread_state where utid = (select utid from tl_main_thread)
) where dur > 0 and (state = 'S' or state glob 'D*')
  and woke_by in (select utid from _tl_is_providers);

-- Where in Python the main thread waited: the pystack family's `wait` slices
-- (each with the stack the thread went to sleep in as `py`) overlapping its
-- stalls, by time; each cut at the next one's start, as span_join needs.
create or replace perfetto table _tl_is_py as
select ts, min(dur, coalesce(next_ts - ts, dur)) as dur, py_line from (
  select s.ts, s.dur, _tl_py_line!(s.arg_set_id) as py_line, lead(s.ts) over (order by s.ts) as next_ts
  from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
  where s.category = 'python' and s.name = 'wait' and s.dur > 0
    and t.tid = (select tid from tl_main_thread) and t.upid is (select upid from tl_main_thread))
where py_line is not null;

drop table if exists _tl_is_pyj;
create virtual table _tl_is_pyj using span_join(_tl_is_wait, _tl_is_py);

create or replace perfetto table _tl_is_pyl as
select py_line, sum(dur) as waited from _tl_is_pyj group by py_line;

create or replace perfetto table _tl_is_pyt as
select (select py_line from _tl_is_pyl order by waited desc, py_line limit 1) as top_line,
  1.0 * (select max(waited) from _tl_is_pyl) / (select sum(dur) from _tl_is_wait) as top_share,
  (select group_concat(part, ', ') from (
     select printf('%s (%.0f%%)', py_line, 100.0 * waited / (select sum(dur) from _tl_is_wait)) as part
     from _tl_is_pyl order by waited desc, py_line limit 3)) as lines;

create or replace perfetto table _tl_is_win as
select * from _tl_windows!(_tl_is_span, cast(${window_s} * 1e9 as int));

drop table if exists _tl_is_wj;
create virtual table _tl_is_wj using span_join(_tl_is_wait, _tl_is_win);

create or replace perfetto table _tl_is_wstate as
select ts, dur, utid, state from thread_state where dur > 0 and utid in (select utid from _tl_is_wmain);

drop table if exists _tl_is_sj;
create virtual table _tl_is_sj using span_join(_tl_is_wstate partitioned utid, _tl_is_wait);

create or replace perfetto table _tl_is_ws as
select
  1.0 * sum(iif(state = 'Running', dur, 0)) / sum(dur) as running,
  1.0 * sum(iif(state glob 'R*' and state != 'Running', dur, 0)) / sum(dur) as runnable,
  1.0 * sum(iif(state glob 'D*', dur, 0)) / sum(dur) as disk,
  1.0 * sum(iif(state = 'S', dur, 0)) / sum(dur) as sleeping
from _tl_is_sj;

create or replace perfetto table _tl_is as
select
  (select name from tl_main_thread) as thread, (select tid from tl_main_thread) as tid,
  (select count(*) from _tl_is_wmain) as workers,
  coalesce((select sum(dur) from _tl_is_wait), 0) as waited,
  (select end_ts - ts from _tl_is_span) as span,
  (select ts from _tl_is_span) as span_ts,
  w.*
from _tl_is_ws w;

select
  case when waited >= ${error_fraction} * span then 'error'
       when waited >= ${warn_fraction} * span then 'warning' else 'ok' end as severity,
  printf('main thread %s (tid %d) waited for batches %.0f%% of the DataLoader''s run (%.2f s of %.2f s)',
         thread, tid, 100.0 * waited / span, waited / 1e9, span / 1e9)
    || iif(waited > 0, printf('; meanwhile its %d workers were running %.0f%%, runnable %.0f%%, in disk '
                              || 'wait (D) %.0f%%, sleeping %.0f%% of the time',
                              workers, 100 * running, 100 * runnable, 100 * disk, 100 * sleeping), '')
    || iif(py.lines is not null, printf('; it waited in Python at %s', py.lines), '') as finding,
  span_ts as ts, span as dur,
  case max(running, runnable, disk, sleeping)
    when disk then 'workers are mostly in disk wait: the input is I/O-bound; cache the data, use faster '
                   || 'storage or more workers to overlap reads'
    when running then 'workers are mostly computing: data loading is CPU-bound; add workers (if there '
                      || 'are idle cores) or make per-sample transforms cheaper'
    when runnable then 'workers are runnable but not running: not enough CPUs for the workers; reduce '
                       || 'other load or the number of threads per worker'
    else 'workers are mostly sleeping (locks, network, sleep calls): find what __getitem__ waits on'
  end as hint,
  round(1.0 * waited / span, 4) as stall_fraction,
  round(waited / 1e9, 3) as waited_s,
  workers,
  round(disk, 3) as workers_disk_wait_fraction,
  round(running, 3) as workers_running_fraction,
  py.top_line as python_line, round(py.top_share, 4) as python_share
from _tl_is, _tl_is_pyt py where span > 0 and thread is not null
union all
select * from (
  select 'info' as severity,
    printf('worst window: the main thread waited %.0f%% of it (%.2f s)', 100.0 * sum(j.dur) / w.dur,
           sum(j.dur) / 1e9) as finding,
    w.ts, w.dur, null as hint, round(1.0 * sum(j.dur) / w.dur, 4) as stall_fraction,
    round(sum(j.dur) / 1e9, 3) as waited_s, null, null, null, null, null
  from _tl_is_wj j join _tl_is_win w using (win)
  where (select waited >= ${warn_fraction} * span from _tl_is)
  group by win having sum(j.dur) >= ${warn_fraction} * w.dur
  order by sum(j.dur) * 1.0 / w.dur desc, w.ts limit cast(${max_windows} as int))  -- ties: the earliest first
union all
select 'info', printf('the DataLoader''s run of %.0f s would need %,d windows of %g s: they are %.0f s long '
                      || 'instead (%,d of them)', (end_ts - ts) / 1e9,
                      (end_ts - ts + cast(${window_s} * 1e9 as int) - 1) / cast(${window_s} * 1e9 as int),
                      ${window_s}, step / 1e9, (end_ts - ts + step - 1) / step),
  null, null, null, null, null, null, null, null, null, null
from (select *, _tl_window_step!(_tl_is_span, cast(${window_s} * 1e9 as int)) as step from _tl_is_span)
where step > cast(${window_s} * 1e9 as int)
union all
select 'n/a', 'no DataLoader worker processes (pt_data_worker) in this trace: with num_workers=0 the main '
  || 'thread loads batches itself and a stall cannot be told apart from training',
  null, null, null, null, null, null, null, null, null, null
where not exists(select 1 from _tl_workers)
union all
select 'n/a', 'DataLoader workers found but no main training thread', null, null, null, null, null, null, null, null,
  null, null
where exists(select 1 from _tl_workers) and not exists(select 1 from tl_main_thread);
