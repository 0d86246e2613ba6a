-- Kernel launches whose CPU time is far above their function's median, and
-- what the launching thread was doing (thread_state) during the worst ones.
-- A kernel's first launch in a process loads its module (CUDA lazy loading,
-- the default since 11.7: up to ~10 ms on an H100): not an outlier, left out;
-- so is every launch of a process' start-up (tl_startup), which warms up more
-- than modules (allocator, library handles, JIT).
-- With Python stacks taken at launches (the pystack family's `py` arg on the
-- launch slices, for 1 launch in N), the outliers name where they came from.
create or replace perfetto table _tl_ll as
select id, ts, dur, name, utid, arg_set_id from (
  select l.id, l.ts, l.dur, l.name, l.utid, l.arg_set_id,
    l.ts < coalesce((select s.end_ts from tl_startup s where s.upid = l.upid), 0) as startup,
    row_number() over (partition by l.upid, coalesce(extract_arg(l.arg_set_id, 'debug.kernel'),
                                                     extract_arg(l.arg_set_id, 'args.kernel'), '')
                       order by l.ts) as nth
  from _tl_launches l where l.dur > 0)
where nth > 1 and not startup;

create or replace perfetto table _tl_ll_stat as
select key as name, n, p50, p99, mx from _tl_percentiles!((select name as key, dur as val from _tl_ll));

create or replace perfetto table _tl_ll_out as
select l.id, l.ts, l.dur, l.name, l.utid, s.p50, _tl_py_line!(l.arg_set_id) as py_line
from _tl_ll l join _tl_ll_stat s using (name)
where l.dur >= ${outlier_factor} * s.p50 and l.dur >= ${min_outlier_us} * 1000;

create or replace perfetto table _tl_ll_worst as
select id as slice_id, ts, dur, name as fn, utid, p50, py_line from _tl_ll_out
order by dur desc limit cast(${max_outliers} as int);

-- Per function: the Python line most of its outliers with a stack came from.
create or replace perfetto table _tl_ll_py as
select * from _tl_top_py_line!(_tl_ll_out);

-- Only the needed columns: span_join refuses duplicate column names.
create or replace perfetto table _tl_ll_ts as
select ts, dur, utid, state from thread_state
where dur > 0 and utid in (select utid from _tl_ll_worst);

drop table if exists _tl_ll_sj;
create virtual table _tl_ll_sj using span_join(_tl_ll_worst partitioned utid, _tl_ll_ts partitioned utid);

create or replace perfetto table _tl_ll_state as
select slice_id,
  1.0 * sum(iif(state = 'Running', dur, 0)) / sum(dur) as running,
  1.0 * sum(iif(state in ('R', 'R+'), dur, 0)) / sum(dur) as runnable,
  1.0 * sum(iif(state = 'S' or state glob 'D*', dur, 0)) / sum(dur) as blocked,
  sum(dur) as covered
from _tl_ll_sj group by slice_id;

select
  iif(s.p99 >= ${p99_error_factor} * s.p50, 'error', 'warning') as severity,
  printf('%s: %,d of %,d launches took over %gx the median (%.1f us); p99 %.1f us (%.0fx the median), '
         || 'worst %.2f ms', s.name, count(o.id), s.n, ${outlier_factor}, s.p50 / 1e3, s.p99 / 1e3,
         1.0 * s.p99 / s.p50, s.mx / 1e6)
    || iif(py.top_line is not null, printf('; launched from %s (%d of the %d outliers with a Python stack)',
                                           py.top_line, py.top_n, py.with_stack), '') as finding,
  min(o.ts) as ts, max(o.ts + o.dur) - min(o.ts) as dur, null as hint,
  s.name as function, count(o.id) as outliers, s.n as launches,
  round(s.p50 / 1e3, 3) as p50_us, round(s.p99 / 1e3, 3) as p99_us, round(s.mx / 1e3, 3) as max_us,
  null as running_fraction, null as runnable_fraction,
  py.top_line as python_line, round(1.0 * py.top_n / py.with_stack, 4) as python_share
from _tl_ll_stat s join _tl_ll_out o using (name) left join _tl_ll_py py on py.name = s.name
group by s.name
union all
select 'info',
  printf('%s took %.2f ms (%.0fx its median) on %s (tid %d)', w.fn, w.dur / 1e6, 1.0 * w.dur / w.p50,
         coalesce(t.name, '?'), t.tid)
    || iif(st.covered is null, '; thread state not recorded',
           printf('; the thread was running %.0f%%, runnable (waiting for a CPU) %.0f%%, sleeping/blocked %.0f%%',
                  100 * st.running, 100 * st.runnable, 100 * st.blocked))
    || iif(w.py_line is not null, printf('; launched from %s', w.py_line), ''),
  w.ts, w.dur,
  case when st.covered is null then null
       when st.runnable >= max(st.running, st.blocked)
         then 'the launching thread lost its CPU: see cpu_contention; keep other work off its core'
       when st.blocked >= st.running
         then 'the driver blocked inside the launch (launch queue full, a lock, page faults)'
       else 'the launch itself burned CPU: argument setup, first-launch module loading or JIT' end,
  w.fn, null, null, null, null, round(w.dur / 1e3, 3),
  round(st.running, 3), round(st.runnable, 3), w.py_line, null
from _tl_ll_worst w join thread t using (utid) left join _tl_ll_state st on st.slice_id = w.slice_id
union all
select 'ok', printf('%s: %,d launches, median %.1f us, p99 %.1f us, no outliers', name, n, p50 / 1e3, p99 / 1e3),
  null, null, null, name, 0, n, round(p50 / 1e3, 3), round(p99 / 1e3, 3), round(mx / 1e3, 3), null, null, null, null
from _tl_ll_stat where name not in (select name from _tl_ll_out)
union all
select 'n/a', iif(exists(select 1 from _tl_launches),
                  'kernel launches were recorded without durations (entry-only probes)',
                  'no kernel launches in this trace'),
  null, null, null, null, null, null, null, null, null, null, null, null, null
where not exists(select 1 from _tl_ll);
