-- Synchronous device allocations and frees per process: rate, latency, time
-- share, and out-of-memory returns (ret 2). Stream-ordered (…Async) variants
-- are cheap by design and only count for OOM.
create or replace perfetto table _tl_ac_calls as
select upid, utid, ts, dur, fn as name,
  fn in ('cudaFree', 'cuMemFree', 'cuMemFree_v2') as is_free,
  fn in ('cudaMalloc', 'cudaMallocManaged', 'cuMemAlloc', 'cuMemAlloc_v2', 'cuMemAllocManaged') as is_malloc,
  coalesce(extract_arg(arg_set_id, 'debug.ret'), extract_arg(arg_set_id, 'args.ret')) as ret,
  coalesce(extract_arg(arg_set_id, 'debug.size'), extract_arg(arg_set_id, 'args.size')) as size
from _tl_cuda
where fn in ('cudaMalloc', 'cudaMallocManaged', 'cudaMallocAsync', 'cuMemAlloc', 'cuMemAlloc_v2',
               'cuMemAllocAsync', 'cudaFree', 'cuMemFree', 'cuMemFree_v2', 'cudaFreeAsync', 'cuMemFreeAsync');

create or replace perfetto table _tl_ac_span as
select upid, min(ts) as ts, max(ts + dur) - min(ts) as span from _tl_cuda group by upid;

create or replace perfetto table _tl_ac_pct as
select key as upid, p50, p99 from _tl_percentiles!((select upid as key, dur as val from _tl_ac_calls where is_malloc));

create or replace perfetto table _tl_ac as
select c.upid, s.ts, s.span,
  sum(c.is_malloc) as mallocs, sum(c.is_free) as frees,
  sum(iif(c.is_malloc or c.is_free, c.dur, 0)) as inside,
  (select p50 from _tl_ac_pct r where r.upid = c.upid) as p50,
  (select p99 from _tl_ac_pct r where r.upid = c.upid) as p99
from _tl_ac_calls c join _tl_ac_span s using (upid) group by c.upid;

create or replace perfetto table _tl_ac_oom as
select upid, count(*) as n, min(ts) as first_ts, max(ts + dur) - min(ts) as dur,
  (select size from _tl_ac_calls x where x.upid = c.upid and x.ret = 2 order by ts limit 1) as size,
  (select name from _tl_ac_calls x where x.upid = c.upid and x.ret = 2 order by ts limit 1) as fn
from _tl_ac_calls c where ret = 2 group by upid;

-- The process' cuda.allocated_bytes counter: value at the first OOM, and peak.
create or replace perfetto table _tl_ac_mem as
select t.upid, max(c.value) as peak,
  (select v.value from counter v where v.track_id = t.id
     and v.ts <= (select first_ts from _tl_ac_oom o where o.upid = t.upid) order by v.ts desc limit 1) as at_oom
from process_counter_track t join counter c on c.track_id = t.id
where t.name in ('cuda.allocated_bytes', 'cuda.allocated_bytes value') group by t.upid;

select 'error' as severity,
  printf('%s (pid %d): %s returned out of memory (2) %,d time%s%s%s', p.name, p.pid, o.fn, o.n, iif(o.n = 1, '', 's'),
         iif(o.size > 0, printf(', first asking for %.1f MiB', o.size / 1048576.0), ''),
         iif(m.at_oom is not null, printf(' with %.1f MiB already allocated (peak %.1f MiB)',
                                          m.at_oom / 1048576.0, m.peak / 1048576.0), '')) as finding,
  o.first_ts as ts, o.dur, 'reduce the batch size or activation memory (checkpointing, mixed precision), '
    || 'or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True if fragmentation is the cause' as hint,
  o.n as oom_returns, null as frees_per_s, null as alloc_time_fraction, null as malloc_p99_us
from _tl_ac_oom o join _tl_pname p using (upid) left join _tl_ac_mem m using (upid)
union all
select
  iif(frees * 1e9 / span >= ${free_rate_warn_per_s} or inside >= ${time_warn_fraction} * span, 'warning', 'ok'),
  printf('%s (pid %d): %,d cudaMalloc and %,d cudaFree in %.2f s (%.1f frees/s); %.1f ms inside them '
         || '(%.1f%% of the CUDA span)%s', p.name, p.pid, mallocs, frees, span / 1e9,
         frees * 1e9 / span, inside / 1e6, 100.0 * inside / span,
         iif(p50 is not null, printf('; cudaMalloc p50 %.1f us, p99 %.1f us', p50 / 1e3, p99 / 1e3), '')),
  a.ts, a.span, null, null, round(frees * 1e9 / span, 2), round(1.0 * inside / span, 4),
  round(p99 / 1e3, 3)
from _tl_ac a join _tl_pname p using (upid) where span > 0
union all
select 'ok', 'no device allocations or frees recorded', null, null, null, null, null, null, null
where not exists(select 1 from _tl_ac);
