-- GPU idle time while the thread that feeds the GPU was busy on the CPU and
-- not inside a call that waits for the GPU. With GPU activity (gpu family)
-- the gaps are each device's real idle time (tl_gpu_window, _tl_gpu_seg);
-- without it, gaps between a process' GPU submissions (launches, graph
-- launches, async copies, NCCL collectives) stand in, with low NVML
-- utilization beside them. Judged on the steady state, after each process'
-- start-up (tl_startup), which gets a line of its own.
create or replace perfetto table _tl_hg_sub as
select upid, utid, ts, dur from _tl_cuda
where category = 'nccl' or id in (select id from _tl_launches)
   or fn in ('cudaGraphLaunch', 'cuGraphLaunch', 'cudaMemcpyAsync', 'cudaMemcpy2DAsync', 'cuMemcpyAsync',
             'cuMemcpyHtoDAsync_v2', 'cuMemcpyDtoHAsync_v2', 'cuMemcpyDtoDAsync_v2', 'cudaMemsetAsync');

create or replace perfetto table _tl_hg_gap as
select row_number() over () as gap_id, g.upid, g.utid, g.ts, g.dur, g.startup, g.device from (
  select w.upid, w.utid, s.ts, s.dur, s.ts < w.ts as startup, s.device
  from _tl_gpu_seg s join tl_gpu_window w using (device)
  where s.k + s.c + s.m = 0 and s.dur >= ${min_idle_us} * 1e3
  union all
  select x.upid, x.utid, x.ts, x.dur, x.ts < coalesce((select end_ts from tl_startup s where s.upid = x.upid), 0),
    null
  from (select upid, utid, ts + dur as ts, lead(ts) over (partition by upid order by ts) - (ts + dur) as dur
        from _tl_hg_sub) x
  where x.dur >= ${min_gap_ms} * 1e6 and not exists(select 1 from _tl_gpu)) g;

-- Per process: the steady state (from the end of start-up, or the first
-- submission, to the end of the last one).
create or replace perfetto table _tl_hg_steady as
select s.upid, max(min(s.ts), coalesce(st.end_ts, 0)) as ts, max(s.ts + s.dur) as end_ts,
  st.ts as first_call, st.end_ts as startup_end
from _tl_hg_sub s left join tl_startup st using (upid) group by s.upid;

-- Waiting for the GPU (or the allocator) inside a gap means the GPU was busy.
-- A gap's blocked time is the sum of its overlaps with the process's
-- blocking calls: W(end) - W(start), where W(t) is the time integral, up to
-- t, of the number of blocking calls in progress. W is built by one sweep
-- over the calls' starts (+1) and ends (-1) per process, and read at each gap
-- edge from the last call edge at or before it (a fill-forward: `grp` counts
-- the call edges so far, and a gap edge shares its group with that one). A
-- range join of gaps with calls here was a nested loop over perfetto tables,
-- quadratic: gaps times calls.
create or replace perfetto table _tl_hg_wait as
with b as (
  select upid, ts, dur from _tl_cuda c
  where c.dur > 0 and c.upid is not null
    and (c.fn glob '*ynchronize' or c.fn in ('cudaMemcpy', 'cudaMemcpy2D', 'cudaMalloc', 'cudaFree', 'cuMemcpy',
                                             'cuMemAlloc_v2', 'cuMemFree_v2', 'cuMemcpyDtoH_v2',
                                             'cuMemcpyHtoD_v2', 'cuMemcpyDtoD_v2')))
select upid, ts, n, coalesce(sum(n * (next_ts - ts)) over (partition by upid order by ts
                                                            rows between unbounded preceding and 1 preceding), 0) as w
from (select upid, ts, n, lead(ts) over (partition by upid order by ts) as next_ts
      from (select upid, ts, sum(sum(d)) over (partition by upid order by ts rows unbounded preceding) as n
            from (select upid, ts, 1 as d from b union all select upid, ts + dur, -1 from b)
            group by upid, ts));

create or replace perfetto table _tl_hg_blocked as
select gap_id, max(iif(edge = 1, w, null)) - max(iif(edge = 0, w, null)) as blocked
from (select gap_id, edge, kind, coalesce(max(ew) over g + max(en) over g * (ts - max(ets) over g), 0) as w
      from (select *, sum(kind) over (partition by upid order by ts, kind desc rows unbounded preceding) as grp
            from (select upid, gap_id, 0 as edge, ts, 0 as kind, null as ets, null as ew, null as en
                  from _tl_hg_gap where upid is not null
                  union all
                  select upid, gap_id, 1, ts + dur, 0, null, null, null from _tl_hg_gap where upid is not null
                  union all
                  select upid, null, null, ts, 1, ts, w, n from _tl_hg_wait))
      window g as (partition by upid, grp))
where kind = 0
group by gap_id;

create or replace perfetto table _tl_hg_ts as
select ts, dur, utid, state from thread_state where dur > 0 and utid in (select utid from _tl_hg_gap);

drop table if exists _tl_hg_sj;
create virtual table _tl_hg_sj using span_join(_tl_hg_gap partitioned utid, _tl_hg_ts partitioned utid);

create or replace perfetto table _tl_hg_active as
select gap_id, sum(iif(state in ('Running', 'R', 'R+'), dur, 0)) as active, sum(dur) as covered
from _tl_hg_sj group by gap_id;

-- Host-bound: not blocked for most of it, and on the CPU. Without thread
-- state (no -e sched) a gap is kept apart as unknown: counted, never judged.
create or replace perfetto table _tl_hg_host as
select g.*, a.covered is null as unknown
from _tl_hg_gap g left join _tl_hg_blocked b using (gap_id) left join _tl_hg_active a using (gap_id)
where coalesce(b.blocked, 0) < 0.5 * g.dur
  and (a.covered is null or a.active >= ${active_fraction} * g.dur);

-- (The longest gaps go first, the earliest of equal ones: the trace's content,
-- never trace_processor's row order, picks; partials/host_gpu_gaps.py does the same.)
-- Per `key` (a process, or a GPU): the steady-state gaps judged (count, total,
-- longest) and those with no thread state to judge them by (count, total).
create or replace perfetto macro _tl_hg_totals(key Expr)
returns TableOrSubquery as (
  select $key as k, sum(not unknown) as gaps, sum(iif(unknown, 0, dur)) as gap_total,
    max(iif(unknown, null, dur)) as longest, sum(unknown) as unknown, sum(iif(unknown, dur, 0)) as unknown_total
  from _tl_hg_host where not startup group by $key
);

create or replace perfetto table _tl_hg as
select w.upid, w.ts, w.end_ts - w.ts as span,
  (select count(*) from _tl_hg_sub s where s.upid = w.upid and s.ts >= w.ts) as subs,
  coalesce(t.gaps, 0) as gaps, coalesce(t.gap_total, 0) as gap_total, t.longest,
  coalesce(t.unknown, 0) as unknown, coalesce(t.unknown_total, 0) as unknown_total
from _tl_hg_steady w left join (select * from _tl_hg_totals!(upid)) t on t.k = w.upid
where not exists(select 1 from _tl_gpu);

-- With GPU activity: per device, over its steady state.
create or replace perfetto table _tl_hg_dev as
select t.device, t.ts, t.span, t.span - t.busy as idle, w.utid,
  coalesce(h.gaps, 0) as gaps, coalesce(h.gap_total, 0) as gap_total, h.longest,
  coalesce(h.unknown, 0) as unknown, coalesce(h.unknown_total, 0) as unknown_total
from tl_gpu_time t join tl_gpu_window w using (device)
  left join (select * from _tl_hg_totals!(device)) h on h.k = t.device;

create or replace perfetto table _tl_hg_util as
select gpu, ts, dur, value, sum(value >= ${low_util_pct}) over (partition by gpu order by ts) as run
from (select replace(replace(t.name, ' value', ''), '.utilization_pct', '') as gpu, c.ts, c.value,
             lead(c.ts) over (partition by c.track_id order by c.ts) - c.ts as dur
      from counter c join counter_track t on c.track_id = t.id
      where t.name glob 'gpu[0-9]*.utilization_pct' or t.name glob 'gpu[0-9]*.utilization_pct value')
where dur is not null
  -- the steady state of the processes submitting work, when there are any
  and ts >= coalesce((select min(ts) from _tl_hg_steady), ts)
  and ts < coalesce((select max(end_ts) from _tl_hg_steady), ts + 1);

create or replace perfetto table _tl_hg_low as
select gpu, sum(iif(value < ${low_util_pct}, dur, 0)) as low, sum(dur) as sampled, count(*) as samples,
  (select ts from (select min(ts) as ts, sum(dur) as d from _tl_hg_util u
                   where u.gpu = x.gpu and u.value < ${low_util_pct} group by run order by d desc limit 1)) as run_ts,
  (select max(d) from (select sum(dur) as d from _tl_hg_util u
                       where u.gpu = x.gpu and u.value < ${low_util_pct} group by run)) as run_dur
from _tl_hg_util x group by gpu;

select
  case when gap_total >= ${error_fraction} * span then 'error'
       when gap_total >= ${warn_fraction} * span then 'warning' when unknown > 0 then 'info' else 'ok' end
    as severity,
  printf('%s (pid %d): %,d gaps of >= %g ms between GPU submissions while the submitting thread was busy on '
         || 'the CPU, %.3f s = %.0f%% of its submission span (%.2f s, %,d submissions)%s',
         p.name, p.pid, gaps, ${min_gap_ms}, gap_total / 1e9, 100.0 * gap_total / span,
         span / 1e9, subs, iif(gaps > 0, printf('; longest %.1f ms', longest / 1e6), ''))
    || iif(unknown > 0, printf('; %d more gaps (%.3f s) not judged: thread state not recorded (-e sched)',
                               unknown, unknown_total / 1e9), '') as finding,
  coalesce((select ts from _tl_hg_host h where h.upid = g.upid and not h.unknown order by dur desc, ts limit 1), g.ts)
    as ts,
  coalesce(longest, span) as dur,
  null as hint,
  round(1.0 * gap_total / span, 4) as gap_fraction, gaps, round(coalesce(longest, 0) / 1e6, 3) as longest_ms,
  null as low_util_fraction
from _tl_hg g join _tl_pname p using (upid) where span > 0
union all
select
  case when gap_total >= ${error_fraction} * span then 'error'
       when gap_total >= ${warn_fraction} * span then 'warning' when unknown > 0 then 'info' else 'ok' end,
  printf('GPU %d was idle %.0f%% of its steady state (%.2f s of %.2f s); %,d idle stretches of >= %g us while '
         || '%s (tid %d), which feeds it, was busy on the CPU: %.3f s = %.0f%%%s', d.device, 100.0 * idle / span,
         idle / 1e9, span / 1e9, gaps, ${min_idle_us}, coalesce(t.name, '?'), t.tid, gap_total / 1e9,
         100.0 * gap_total / span, iif(gaps > 0, printf('; longest %.1f ms', longest / 1e6), ''))
    || iif(unknown > 0, printf('; %d more stretches (%.3f s) not judged: thread state not recorded (-e sched)',
                               unknown, unknown_total / 1e9), ''),
  coalesce((select ts from _tl_hg_host h where h.device = d.device and not h.startup and not h.unknown
            order by dur desc, ts limit 1),
           d.ts),
  coalesce(longest, span), null,
  round(1.0 * gap_total / span, 4), gaps, round(coalesce(longest, 0) / 1e6, 3), null
from _tl_hg_dev d left join thread t using (utid) where span > 0
union all
select 'info',
  printf('start-up of %s (pid %d): %.2f s from its first CUDA call to the first launch of its last new kernel, '
         || 'with no GPU submissions for %.2f s of it (%d gaps of >= %g ms, longest %.1f ms): module loading, '
         || 'library set-up, the input pipeline''s first batches; the steady state is judged from +%.2f s on',
         p.name, p.pid, (w.startup_end - w.first_call) / 1e9,
         coalesce((select sum(dur) from _tl_hg_gap x where x.upid = w.upid and x.startup), 0) / 1e9,
         (select count(*) from _tl_hg_gap x where x.upid = w.upid and x.startup), ${min_gap_ms},
         coalesce((select max(dur) from _tl_hg_gap x where x.upid = w.upid and x.startup), 0) / 1e6,
         (w.startup_end - trace_start()) / 1e9),
  w.first_call, w.startup_end - w.first_call, null, null,
  (select count(*) from _tl_hg_gap x where x.upid = w.upid and x.startup),
  round(coalesce((select max(dur) from _tl_hg_gap x where x.upid = w.upid and x.startup), 0) / 1e6, 3), null
from _tl_hg_steady w join _tl_pname p using (upid) where w.startup_end - w.first_call >= ${min_gap_ms} * 1e6
union all
select * from (
  select 'info', printf('GPU idle for %.1f ms after a submission while the host thread was busy', h.dur / 1e6),
    h.ts, h.dur, null, null, null, round(h.dur / 1e6, 3), null
  from _tl_hg_host h
  where not h.startup and not h.unknown
    and (exists(select 1 from _tl_hg g where g.upid = h.upid and h.device is null
                and g.gap_total >= ${warn_fraction} * g.span)
         or exists(select 1 from _tl_hg_dev d where d.device = h.device and d.gap_total >= ${warn_fraction} * d.span))
  order by h.dur desc, h.ts limit 3)
union all
-- NVML averages utilization over its own sample period: fewer than three
-- samples say too little to warn on.
select iif(low >= ${util_warn_fraction} * sampled, iif(samples >= 3, 'warning', 'info'), 'ok'),
  printf('%s utilization was below %g%% for %.0f%% of the sampled time (%.2f s of %.2f s, %d samples)%s', gpu,
         ${low_util_pct}, 100.0 * low / sampled, low / 1e9, sampled / 1e9, samples,
         iif(run_dur > 0, printf('; longest low stretch %.2f s', run_dur / 1e9), '')),
  iif(run_dur > 0, run_ts, null), iif(run_dur > 0, run_dur, null),
  'the GPU waits for work: see the submission gaps and the input pipeline; larger batches or CUDA '
    || 'graphs raise utilization',
  null, null, null, round(1.0 * low / sampled, 4)
from _tl_hg_low where sampled > 0 and not exists(select 1 from _tl_gpu);
