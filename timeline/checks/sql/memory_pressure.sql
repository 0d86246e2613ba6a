-- Memory-pressure stalls per thread (mem family: direct reclaim, memcg
-- reclaim, compaction slices) and OOM kills of the job's processes
-- ('killed by OOM' instants) or, as machine context, of other processes.
create or replace perfetto table _tl_mp_stall as
select t.tid, coalesce(t.name, '?') as thread, p.pid, coalesce(p.name, '?') as process,
  t.tid = p.pid as is_main, s.name as kind, count(*) as n, sum(s.dur) as total, max(s.dur) as mx,
  min(s.ts) as first_ts, max(s.ts + s.dur) - min(s.ts) as span,
  max(coalesce(extract_arg(s.arg_set_id, 'debug.major_faults'), extract_arg(s.arg_set_id, 'args.major_faults')))
    as majflt
from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid) left join process p using (upid)
where s.category = 'memory' and s.name in ('direct reclaim', 'memcg reclaim', 'compaction')
group by t.utid, s.name;

create or replace perfetto table _tl_mp_oom as
select s.ts, s.name,
  coalesce(extract_arg(s.arg_set_id, 'debug.victim'), extract_arg(s.arg_set_id, 'args.victim')) as victim,
  coalesce(extract_arg(s.arg_set_id, 'debug.pid'), extract_arg(s.arg_set_id, 'args.pid')) as pid,
  coalesce(extract_arg(s.arg_set_id, 'debug.rss_bytes'), extract_arg(s.arg_set_id, 'args.rss_bytes')) as rss,
  coalesce(extract_arg(s.arg_set_id, 'debug.killer'), extract_arg(s.arg_set_id, 'args.killer')) as killer
from slice s
where s.category = 'memory' and (s.name = 'killed by OOM' or s.name glob 'OOM kill: *');

select
  case when total >= ${error_ms} * 1e6 then 'error' when total >= ${warn_ms} * 1e6 then 'warning' else 'info' end
    as severity,
  printf('%s (tid %d, %s of %s pid %d): %.1f ms in %s, %,d stalls, longest %.2f ms%s', thread, tid,
         iif(is_main, 'main thread', 'thread'), process, pid, total / 1e6, kind, n, mx / 1e6,
         iif(majflt is not null, printf('; %,d major faults so far', majflt), '')) as finding,
  first_ts as ts, span as dur,
  iif(kind = 'memcg reclaim', 'Its cgroup is at its memory limit or memory.high: raise it, or lower the job''s '
      || 'memory (fewer DataLoader workers, smaller prefetch_factor, no page-cache-heavy reads).', null) as hint,
  thread, tid, kind, n as stalls, round(total / 1e6, 3) as stall_ms
from _tl_mp_stall
union all
select iif(name = 'killed by OOM', 'error', 'info'),
  iif(name = 'killed by OOM',
      printf('the OOM killer killed %s (pid %d) of this job%s', coalesce(victim, '?'), pid,
             iif(rss is not null, printf(', %.0f MiB resident', rss / 1048576.0), '')),
      printf('the OOM killer killed %s (pid %d), a process outside this job (machine context)',
             coalesce(victim, '?'), pid)),
  ts, 0, null, victim, pid, 'oom kill', null, null
from _tl_mp_oom
order by 1;
