-- Achieved throughput per connection (net family counters 'net <local> ↔
-- <peer> sent_bytes_per_s' / 'received_bytes_per_s', one value per 10 ms
-- bucket, 0 after an idle one): bytes moved divided by the time it was moving
-- them (its active buckets), against the best connection of the trace, each
-- direction as its receiving end saw it.  A
-- link much slower than the others, at the same job, is a slow path.
create or replace perfetto table _tl_nt_pts as
select t.id as track, t.name, c.ts, c.value,
  lead(c.ts) over (partition by t.id order by c.ts) - c.ts as span
from counter c join counter_track t on c.track_id = t.id
where t.name glob 'net *↔* sent_bytes_per_s' or t.name glob 'net *↔* received_bytes_per_s';

create or replace perfetto table _tl_nt as
select name, substr(name, 5, length(name) - 4 - iif(name glob '* sent_bytes_per_s', 17, 21)) as conn,
  iif(name glob '* sent_bytes_per_s', 'sent', 'received') as dir,
  sum(value * coalesce(span, 1e7) / 1e9) as bytes, sum(iif(value > 0, coalesce(span, 1e7), 0)) as active_ns,
  min(ts) as ts, max(ts) - min(ts) as dur
from _tl_nt_pts group by track;

-- A direction is measured where its bytes arrive: a blocking send() of many MB
-- returns once, so its bytes land in the bucket where it returned and the sent
-- side reads several times faster than the link (a clean veth: sent 3200 MiB/s,
-- received 1000-1800).  So a 'sent' row counts only when its receiving end was
-- not recorded (no 'received' row for the mirrored connection; merged traces
-- label the peer '(rank N)', left out of the match).
create or replace perfetto table _tl_nt_ends as
select *, substr(conn, 1, instr(conn, ' ↔ ') - 1) as near,
  substr(conn, instr(conn, ' ↔ ') + 3) as far_label
from _tl_nt where active_ns > 0 and bytes >= ${min_mib} * 1048576;

create or replace perfetto table _tl_nt_dir as
select *, iif(instr(far_label, ' (') > 0, substr(far_label, 1, instr(far_label, ' (') - 1), far_label) as far
from _tl_nt_ends;

create or replace perfetto table _tl_nt_rate as
select d.*, bytes / (active_ns / 1e9) as rate from _tl_nt_dir d
where d.dir = 'received'
   or not exists (select 1 from _tl_nt_dir r where r.dir = 'received' and r.near = d.far and r.far = d.near);

create or replace perfetto table _tl_nt_best as
select max(rate) as best from _tl_nt_rate;

select * from (
  select iif(rate < ${slow_fraction} * (select best from _tl_nt_best), 'warning', 'info') as severity,
    printf('%s %s %.1f MiB at %.1f MiB/s while active (%.0f%% of the best connection''s %.1f MiB/s), '
           || 'active %.2f s of %.2f s',
           conn, dir, bytes / 1048576.0, rate / 1048576.0, 100.0 * rate / (select best from _tl_nt_best),
           (select best from _tl_nt_best) / 1048576.0, active_ns / 1e9, dur / 1e9) as finding,
    ts, dur, null as hint, conn, dir, round(bytes / 1048576.0, 3) as mib, round(rate / 1048576.0, 3) as mib_per_s,
    round(rate / (select best from _tl_nt_best), 4) as of_best
  from _tl_nt_rate order by rate / (select best from _tl_nt_best) limit 10)
union all
select 'n/a', printf('no connection moved %g MiB or more', ${min_mib}), null, null, null, null, null, null, null, null
where not exists(select 1 from _tl_nt_rate);
