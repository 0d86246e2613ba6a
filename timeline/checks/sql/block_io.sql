-- Block request latency per device, who issued the slow ones, and which
-- threads sat in uninterruptible sleep (D) according to the sched data.
--
-- Map-reduce form (checks/traceset.py): above the @reduce line runs per chunk
-- of a trace set. Percentiles come from a mergeable sketch: a device's
-- latencies are shipped exactly while it has at most 4096 requests (in the
-- chunk, and in all), else as log buckets of ratio 1.01, each reported at its
-- geometric middle: within 0.5% of the exact value. The count, the max, the
-- bytes and who issued the slow ones are exact. A request cut at a chunk
-- boundary is shipped in pieces (debug.timeline_span_id) and rejoined below.
-- D sleep is summed per thread over the chunks (a sleep across a boundary is
-- counted up to it).
create or replace perfetto table _tl_bio as
select s.ts, s.dur,
  coalesce(cast(coalesce(extract_arg(s.arg_set_id, 'debug.dev'), extract_arg(s.arg_set_id, 'args.dev')) as text),
           t.name, '?') as dev,
  coalesce(extract_arg(s.arg_set_id, 'debug.bytes'), extract_arg(s.arg_set_id, 'args.bytes')) as bytes,
  coalesce(extract_arg(s.arg_set_id, 'debug.tid'), extract_arg(s.arg_set_id, 'args.tid')) as tid,
  coalesce(extract_arg(s.arg_set_id, 'debug.timeline_span_id'), extract_arg(s.arg_set_id, 'args.timeline_span_id'))
    as span_id
from slice s left join track t on s.track_id = t.id
where s.category = 'block_io';

create or replace perfetto table _tl_bio_n0 as
select dev, count(*) <= 4096 as exact from _tl_bio where span_id is null group by dev;

create or replace perfetto table _tl_bio_part as
-- whole requests: latency (exact, or its bucket), count
select 'lat' as kind, b.dev, iif(n.exact, b.dur, null) as val,
  iif(b.dur >= 1, cast(floor(ln(b.dur) / ln(1.01)) as int), -1) as bucket, count(*) as cnt,
  null as tid, null as name, null as ts, null as dur, null as span_id
from _tl_bio b join _tl_bio_n0 n using (dev) where b.span_id is null
group by b.dev, iif(n.exact, b.dur, null), 4
union all  -- the longest whole request per device, its bytes
select 'max', dev, sum(bytes), null, null, null, null,
  (select x.ts from _tl_bio x where x.dev = b.dev and x.span_id is null order by x.dur desc, x.ts limit 1),
  max(dur), null
from _tl_bio b where span_id is null group by dev
union all  -- slow whole requests per issuing thread
select 'slow', dev, null, null, count(*), tid, (select max(t.name) from thread t where t.tid = b.tid), null, null, null
from _tl_bio b where span_id is null and dur >= ${p99_warn_ms} * 1e6 and tid is not null group by dev, tid
union all  -- pieces of cut requests
select 'piece', dev, bytes, null, null, tid, (select max(t.name) from thread t where t.tid = b.tid), ts, dur, span_id
from _tl_bio b where span_id is not null
union all  -- uninterruptible sleep per thread
select 'D', null, null, null, null, t.tid, t.name, null, sum(s.dur), null
from thread_state s join thread t using (utid)
where s.state glob 'D*' and s.dur > 0 and t.upid is not null group by s.utid;

-- @reduce _tl_bio_part
create or replace perfetto table _tl_bio_cut as
select dev, max(tid) as tid, max(name) as name, max(val) as bytes, min(ts) as ts, max(ts + dur) - min(ts) as dur
from _tl_bio_part where kind = 'piece' group by span_id;

create or replace perfetto table _tl_bio_vals as
select dev, val, bucket, cnt from _tl_bio_part where kind = 'lat'
union all
select dev, dur, iif(dur >= 1, cast(floor(ln(dur) / ln(1.01)) as int), -1), 1 from _tl_bio_cut;

create or replace perfetto table _tl_bio_n as
select dev, sum(cnt) as n, sum(cnt) <= 4096 and count(val) = count(*) as exact from _tl_bio_vals group by dev;

create or replace perfetto table _tl_bio_pv as
select v.dev, n.n,
  iif(n.exact, v.val, iif(v.bucket < 0, 0, cast(round(exp((v.bucket + 0.5) * ln(1.01))) as int))) as val,
  sum(v.cnt) as cnt
from _tl_bio_vals v join _tl_bio_n n using (dev) group by 1, 3;

create or replace perfetto table _tl_bio_cum as
select dev, n, val, sum(cnt) over (partition by dev order by val rows between unbounded preceding and current row)
  as cum
from _tl_bio_pv;

create or replace perfetto table _tl_bio_worst as
select dev, ts, dur, val as bytes from _tl_bio_part where kind = 'max'
union all
select dev, ts, dur, bytes from _tl_bio_cut;

create or replace perfetto table _tl_bio_dev as
select c.dev, c.n, min(iif(c.cum >= max(1, ceil(0.50 * c.n)), c.val, null)) as p50,
  min(iif(c.cum >= max(1, ceil(0.99 * c.n)), c.val, null)) as p99,
  (select max(w.dur) from _tl_bio_worst w where w.dev = c.dev) as mx,
  (select w.ts from _tl_bio_worst w where w.dev = c.dev order by w.dur desc, w.ts limit 1) as worst_ts,
  (select coalesce(sum(w.bytes), 0) from _tl_bio_worst w where w.dev = c.dev) as bytes
from _tl_bio_cum c group by c.dev;

create or replace perfetto table _tl_bio_who as
select b.dev, group_concat(printf('%s (tid %d, %,d requests)', coalesce(b.name, '?'), b.tid, b.n), ', ') as who
from (select dev, tid, max(name) as name, sum(n) as n from (
        select dev, tid, name, cnt as n from _tl_bio_part where kind = 'slow'
        union all
        select dev, tid, name, 1 from _tl_bio_cut where dur >= ${p99_warn_ms} * 1e6 and tid is not null)
      group by dev, tid order by n desc, tid) b
group by b.dev;

create or replace perfetto table _tl_bio_d as
select group_concat(printf('%s (tid %d) %.2f s', name, tid, d / 1e9), ', ') as who, sum(d) as total from (
  select max(name) as name, tid, sum(dur) as d from _tl_bio_part where kind = 'D'
  group by tid having d >= 1e6 order by d desc, tid limit 3);

select * from (
select
  case when d.p99 >= ${p99_error_ms} * 1e6 then 'error'
       when d.p99 >= ${p99_warn_ms} * 1e6 then 'warning' else 'ok' end as severity,
  printf('device %s: %,d requests, latency p50 %.2f ms, p99 %.2f ms, max %.2f ms, %.1f MiB', d.dev, d.n,
         d.p50 / 1e6, d.p99 / 1e6, d.mx / 1e6, d.bytes / 1048576.0)
    || iif(w.who is not null, printf('; requests over %g ms were issued by %s', ${p99_warn_ms}, w.who), '')
    as finding,
  d.worst_ts as ts, d.mx as dur, null as hint,
  d.dev as device, round(d.p99 / 1e6, 3) as p99_ms, round(d.mx / 1e6, 3) as max_ms
from _tl_bio_dev d left join _tl_bio_who w using (dev) order by d.dev)
union all
select iif(exists(select 1 from _tl_bio_dev where p99 >= ${p99_warn_ms} * 1e6), 'info', 'ok'),
  printf('threads in uninterruptible sleep (D): %s', who), null, null, null, null, null, null
from _tl_bio_d where total > 0;
