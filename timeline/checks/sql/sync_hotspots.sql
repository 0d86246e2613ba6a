-- Time each thread spends in calls that wait for the GPU: stream/device/event
-- synchronizations and blocking device-to-host copies, as a share of the
-- thread's CUDA span (its first to last CUDA call).  With Python stacks (the
-- pystack family's `py` arg on the calls), the lines they were called from.
create or replace perfetto table _tl_sh_calls as
select utid, ts, dur, fn as name, _tl_py_line!(arg_set_id) as py_line,
  iif(fn glob 'cuMemcpyDtoH*', 'D2H',
      coalesce(extract_arg(arg_set_id, 'debug.kind'), extract_arg(arg_set_id, 'args.kind'))) as kind,
  coalesce(extract_arg(arg_set_id, 'debug.bytes'), extract_arg(arg_set_id, 'args.bytes')) as bytes
from _tl_cuda
where fn in ('cudaStreamSynchronize', 'cudaDeviceSynchronize', 'cudaEventSynchronize',
             'cuStreamSynchronize', 'cuCtxSynchronize', 'cuEventSynchronize',
             'cudaMemcpy', 'cudaMemcpy2D', 'cuMemcpy', 'cuMemcpyDtoH', 'cuMemcpyDtoH_v2');

create or replace perfetto table _tl_sh_sync as
select utid, dur, py_line, iif(kind = 'D2H', name || ' D2H', name) as label,
  kind = 'D2H' and bytes <= ${small_copy_bytes} as small
from _tl_sh_calls where name glob '*ynchronize' or kind = 'D2H';

create or replace perfetto table _tl_sh_span as
select utid, min(ts) as ts, max(ts + dur) - min(ts) as span from _tl_cuda group by utid;

create or replace perfetto table _tl_sh_fn as
select utid, label, sum(dur) as total, count(*) as n, sum(small) as small
from _tl_sh_sync group by utid, label;

-- Per thread: its Python lines by time waited there (share of all its sync time), the top 3.
create or replace perfetto table _tl_sh_pyl as
select utid, py_line, sum(dur) as waited from _tl_sh_sync where py_line is not null group by utid, py_line;

create or replace perfetto table _tl_sh_py as
select t.utid, (select x.py_line from _tl_sh_pyl x where x.utid = t.utid order by x.waited desc, x.py_line limit 1)
    as top_line,
  1.0 * (select max(x.waited) from _tl_sh_pyl x where x.utid = t.utid) / t.total as top_share,
  (select group_concat(part, ', ') from (
     select printf('%s (%.0f%%)', x.py_line, 100.0 * x.waited / t.total) as part
     from _tl_sh_pyl x where x.utid = t.utid order by x.waited desc, x.py_line limit 3)) as lines
from (select utid, sum(dur) as total from _tl_sh_sync group by utid) t
where t.total > 0 and exists(select 1 from _tl_sh_pyl x where x.utid = t.utid);

create or replace perfetto table _tl_sh as
select f.utid, sum(f.total) as total, sum(f.n) as n, sum(f.small) as small, s.ts, s.span,
  (select group_concat(part, ', ') from (
     select printf('%s %.3f s (%,d calls%s)', x.label, x.total / 1e9, x.n,
                   iif(x.small > 0, printf(', %,d of <= %d B: scalar reads like .item()', x.small,
                                           cast(${small_copy_bytes} as int)), '')) as part
     from _tl_sh_fn x where x.utid = f.utid order by x.total desc)) as parts
from _tl_sh_fn f join _tl_sh_span s using (utid)
group by f.utid;

select
  case when total >= ${error_fraction} * span then 'error'
       when total >= ${warn_fraction} * span then 'warning' else 'ok' end as severity,
  printf('%s (tid %d) spent %.0f%% of its CUDA span (%.2f s of %.2f s) waiting for the GPU: %s',
         coalesce(t.name, '?'), t.tid, 100.0 * total / span, total / 1e9, span / 1e9, parts)
    || iif(py.lines is not null, printf('; called at %s', py.lines), '') as finding,
  s.ts, s.span as dur,
  iif(small > 0 and small * 2 >= n,
      'most waits are tiny device-to-host copies: scalar reads (.item(), float(tensor), printing) in '
        || 'the loop; accumulate on the GPU and read every N steps', null) as hint,
  round(1.0 * total / span, 4) as sync_fraction, n as sync_calls, small as scalar_reads,
  py.top_line as python_line, round(py.top_share, 4) as python_share
from _tl_sh s join thread t using (utid) left join _tl_sh_py py using (utid)
where span > 0 and (total >= 0.01 * span or utid = (select utid from tl_main_thread))
union all
select 'ok', 'no synchronizing CUDA calls (stream/device/event syncs, blocking D2H copies)',
  null, null, null, 0, 0, 0, null, null
where not exists(select 1 from _tl_sh);
