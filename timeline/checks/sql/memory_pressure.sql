-- Memory-pressure stalls per thread (mem family: direct reclaim, memcg
-- reclaim, compaction slices) and OOM kills of the job's processes
-- ('killed by OOM' instants) or, as machine context, of other processes.
--
-- Map-reduce form (checks/traceset.py): above the @reduce line runs per chunk
-- of a trace set. A stall cut at a chunk boundary is shipped in pieces
-- (debug.timeline_span_id) and rejoined below, so counts and the longest are
-- the whole recording's.
create or replace perfetto table _tl_mp_s as
select t.tid, coalesce(t.name, '?') as thread, p.pid, coalesce(p.name, '?') as process,
  t.tid = p.pid as is_main, s.name as kind, s.ts, s.dur,
  coalesce(extract_arg(s.arg_set_id, 'debug.major_faults'), extract_arg(s.arg_set_id, 'args.major_faults'))
    as majflt,
  coalesce(extract_arg(s.arg_set_id, 'debug.timeline_span_id'), extract_arg(s.arg_set_id, 'args.timeline_span_id'))
    as span_id
from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid) left join process p using (upid)
where s.category = 'memory' and s.name in ('direct reclaim', 'memcg reclaim', 'compaction');

create or replace perfetto table _tl_mp_oom as
select s.ts, s.name,
  coalesce(extract_arg(s.arg_set_id, 'debug.victim'), extract_arg(s.arg_set_id, 'args.victim')) as victim,
  coalesce(extract_arg(s.arg_set_id, 'debug.pid'), extract_arg(s.arg_set_id, 'args.pid')) as pid,
  coalesce(extract_arg(s.arg_set_id, 'debug.rss_bytes'), extract_arg(s.arg_set_id, 'args.rss_bytes')) as rss,
  coalesce(extract_arg(s.arg_set_id, 'debug.killer'), extract_arg(s.arg_set_id, 'args.killer')) as killer
from slice s
where s.category = 'memory' and (s.name = 'killed by OOM' or s.name glob 'OOM kill: *');

create or replace perfetto table _tl_mp_part as
select 'stall' as kind, tid, thread, pid, process, is_main, kind as what, count(*) as n, sum(dur) as total,
  max(dur) as mx, min(ts) as ts, max(ts + dur) as end_ts, max(majflt) as majflt, null as span_id, null as extra
from _tl_mp_s where span_id is null group by tid, thread, pid, process, kind
union all
select 'piece', tid, thread, pid, process, is_main, kind, 0, dur, null, ts, ts + dur, majflt, span_id, null
from _tl_mp_s where span_id is not null
union all
select 'oom', null, victim, pid, killer, rss, name, null, null, null, ts, null, null, null, null from _tl_mp_oom;

-- @reduce _tl_mp_part
create or replace perfetto table _tl_mp_all as
select tid, thread, pid, process, is_main, what, n, total, mx, ts, end_ts, majflt from _tl_mp_part where kind = 'stall'
union all
select max(tid), max(thread), max(pid), max(process), max(is_main), max(what), 1, sum(total),
  max(end_ts) - min(ts), min(ts), max(end_ts), max(majflt)
from _tl_mp_part where kind = 'piece' group by span_id;

create or replace perfetto table _tl_mp_stall as
select tid, thread, pid, process, is_main, what as kind, sum(n) as n, sum(total) as total, max(mx) as mx,
  min(ts) as first_ts, max(end_ts) - min(ts) as span, max(majflt) as majflt
from _tl_mp_all group by tid, thread, pid, process, what;

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
from (select ts, what as name, thread as victim, pid, is_main as rss from _tl_mp_part where kind = 'oom')
order by 1, 2;
