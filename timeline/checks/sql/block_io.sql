-- Block request latency per device, who issued the slow ones, and which
-- threads sat in uninterruptible sleep (D) according to the sched data.
create or replace perfetto table _tl_bio as
select s.ts, s.dur,
  coalesce(cast(coalesce(extract_arg(s.arg_set_id, 'debug.dev'), extract_arg(s.arg_set_id, 'args.dev')) as text),
           t.name, '?') as dev,
  coalesce(extract_arg(s.arg_set_id, 'debug.bytes'), extract_arg(s.arg_set_id, 'args.bytes')) as bytes,
  coalesce(extract_arg(s.arg_set_id, 'debug.tid'), extract_arg(s.arg_set_id, 'args.tid')) as tid
from slice s left join track t on s.track_id = t.id
where s.category = 'block_io';

create or replace perfetto table _tl_bio_dev as
select key as dev, n, p50, p99, mx from _tl_percentiles!((select dev as key, dur as val from _tl_bio));

create or replace perfetto table _tl_bio_who as
select b.dev, group_concat(printf('%s (tid %d, %,d requests)', coalesce(t.name, '?'), b.tid, b.n), ', ') as who from (
  select dev, tid, count(*) as n from _tl_bio x
  where dur >= ${p99_warn_ms} * 1e6 and tid is not null group by dev, tid order by n desc) b
left join thread t on t.tid = b.tid
group by b.dev;

create or replace perfetto table _tl_bio_d as
select group_concat(printf('%s (tid %d) %.2f s', name, tid, d / 1e9), ', ') as who, sum(d) as total from (
  select t.name, t.tid, sum(s.dur) as d from thread_state s join thread t using (utid)
  where s.state glob 'D*' and s.dur > 0 and t.upid is not null
  group by s.utid having d >= 1e6 order by d desc limit 3);

select
  case when d.p99 >= ${p99_error_ms} * 1e6 then 'error'
       when d.p99 >= ${p99_warn_ms} * 1e6 then 'warning' else 'ok' end as severity,
  printf('device %s: %,d requests, latency p50 %.2f ms, p99 %.2f ms, max %.2f ms, %.1f MiB', d.dev, d.n,
         d.p50 / 1e6, d.p99 / 1e6, d.mx / 1e6, coalesce((select sum(bytes) from _tl_bio b where b.dev = d.dev), 0)
         / 1048576.0)
    || iif(w.who is not null, printf('; requests over %g ms were issued by %s', ${p99_warn_ms}, w.who), '')
    as finding,
  (select ts from _tl_bio b where b.dev = d.dev order by dur desc limit 1) as ts, d.mx as dur, null as hint,
  d.dev as device, round(d.p99 / 1e6, 3) as p99_ms, round(d.mx / 1e6, 3) as max_ms
from _tl_bio_dev d left join _tl_bio_who w using (dev)
union all
select iif(exists(select 1 from _tl_bio_dev where p99 >= ${p99_warn_ms} * 1e6), 'info', 'ok'),
  printf('threads in uninterruptible sleep (D): %s', who), null, null, null, null, null, null
from _tl_bio_d where total > 0;
