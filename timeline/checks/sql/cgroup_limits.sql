-- Container limits (cgroup family): CFS bandwidth throttling and memory
-- limit events of the recorded processes' cgroups, from the counter tracks
-- 'cgroup LABEL COUNTER' (totals since the recording began).
--
-- Map-reduce form (checks/traceset.py): above the @reduce line runs per chunk
-- of a trace set; a chunk repeats each counter's last value at its start, so
-- the largest value and the earliest non-zero sample over the chunks are the
-- whole recording's.
create or replace perfetto table _tl_cl_track as
select t.id, t.name, m.metric, substr(t.name, 8, length(t.name) - 8 - length(m.metric)) as cg,
  (select max(c.value) from counter c where c.track_id = t.id) as mx,
  (select min(c.ts) from counter c where c.track_id = t.id and c.value > 0) as first_ts
from counter_track t join (
  select 'cpu.nr_periods' as metric union all select 'cpu.nr_throttled' union all select 'cpu.throttled_ms'
  union all select 'memory.events.high' union all select 'memory.events.max' union all select 'memory.failcnt'
  union all select 'memory.events.oom_kill' union all select 'memory.oom_kill') m
  on t.name glob 'cgroup * ' || m.metric;

create or replace perfetto table _tl_cl_part as
select 'track' as kind, metric, cg, mx, first_ts from _tl_cl_track
union all
select 'bounds', null, null, end_ts, start_ts from trace_bounds;

-- @reduce _tl_cl_part
create or replace perfetto table _tl_cl_t as
select metric, cg, max(mx) as mx, min(first_ts) as first_ts from _tl_cl_part where kind = 'track' group by metric, cg;

create or replace perfetto table _tl_cl_cpu as
select p.cg, p.mx as periods, coalesce(n.mx, 0) as throttled, coalesce(ms.mx, 0) as throttled_ms,
  100.0 * coalesce(n.mx, 0) / p.mx as pct, n.first_ts
from _tl_cl_t p
left join _tl_cl_t n on n.cg = p.cg and n.metric = 'cpu.nr_throttled'
left join _tl_cl_t ms on ms.cg = p.cg and ms.metric = 'cpu.throttled_ms'
where p.metric = 'cpu.nr_periods' and p.mx > 0;

select
  case when pct >= ${error_pct} then 'error' when pct >= ${warn_pct} then 'warning' else 'ok' end as severity,
  printf('cgroup %s: throttled in %.0f%% of its CFS periods (%,d of %,d), %.2f s throttled in a %.2f s recording',
         cg, pct, cast(throttled as int), cast(periods as int), throttled_ms / 1e3,
         (select max(mx) - min(first_ts) from _tl_cl_part where kind = 'bounds') / 1e9) as finding,
  first_ts as ts, null as dur,
  'Its CPU quota (cpu.max / cpu.cfs_quota_us) is used up before each period ends: raise it, or run no more '
    || 'threads than it allows (torch.set_num_threads, OMP_NUM_THREADS, DataLoader num_workers).' as hint,
  cg as cgroup, round(pct, 1) as throttled_pct, round(throttled_ms, 1) as throttled_ms
from _tl_cl_cpu
union all
select iif(metric in ('memory.events.oom_kill', 'memory.oom_kill'), 'error', 'warning'),
  printf('cgroup %s: %s %,d times', cg,
         case metric when 'memory.events.high' then 'went over memory.high (its tasks reclaimed and were throttled)'
                     when 'memory.events.max' then 'hit its memory limit (memory.max)'
                     when 'memory.failcnt' then 'hit its memory limit (memory.limit_in_bytes)'
                     else 'had a process killed by the OOM killer' end, cast(mx as int)),
  first_ts, null,
  'The cgroup''s memory limit is too tight for the job: raise memory.high / memory.max (limit_in_bytes), or '
    || 'lower the job''s memory (fewer DataLoader workers, smaller batches, less page cache).',
  cg, null, null
from _tl_cl_t
where metric in ('memory.events.high', 'memory.events.max', 'memory.failcnt', 'memory.events.oom_kill',
                 'memory.oom_kill') and mx > 0
order by cgroup, severity;
