-- Events lost in the ring buffers: per-CPU ftrace stats (overrun_end counts
-- full-ring losses, dropped_events_delta every loss, refusals with room left
-- included; take the larger) and the recorder's cumulative
-- 'timeline: <family> records dropped' counters.
create or replace perfetto table _tl_de_cpu as
select idx as cpu, max(value) as dropped from stats
where name in ('ftrace_cpu_overrun_end', 'ftrace_cpu_dropped_events_delta') and idx is not null
group by idx;

create or replace perfetto table _tl_de_counter as
select replace(replace(t.name, 'timeline: ', ''), ' records dropped', '') as family,
  max(c.value) as dropped,
  -- the drops happened after the last zero sample and by the first non-zero one
  (select max(z.ts) from counter z where z.track_id = t.id and z.value = 0) as last_zero_ts,
  (select min(n.ts) from counter n where n.track_id = t.id and n.value > 0) as first_ts
from counter_track t join counter c on c.track_id = t.id
where t.name glob 'timeline: * records dropped'
group by t.id;

create or replace perfetto table _tl_de as
select
  max(coalesce((select sum(dropped) from _tl_de_cpu), 0),
      coalesce((select sum(dropped) from _tl_de_counter), 0)) as dropped,
  (select count(*) from sched) as recorded,
  (select count(*) from _tl_de_cpu) as cpus,
  (select group_concat(cpu || ':' || cast(dropped as int), ' ') from _tl_de_cpu where dropped > 0) as per_cpu,
  (select group_concat(family || ' ' || cast(dropped as int), ', ') from _tl_de_counter where dropped > 0)
    as per_family,
  (select min(coalesce(last_zero_ts, (select start_ts from trace_bounds))) from _tl_de_counter
    where dropped > 0) as win_start,
  (select min(first_ts) from _tl_de_counter where dropped > 0) as win_end;

select
  case when dropped = 0 then 'ok'
       when dropped >= ${error_fraction} * (recorded + dropped) then 'error'
       else 'warning' end as severity,
  case when dropped = 0 then printf('no events lost (%d CPUs, %,d switches recorded)', cpus, recorded)
       else printf('%,d events were lost (%.1f%% of what the kernel emitted, against %,d recorded switches)%s;'
                   || ' the other checks see an incomplete trace',
                   cast(dropped as int), 100.0 * dropped / (recorded + dropped), recorded,
                   coalesce('; by family: ' || per_family, ''))
  end as finding,
  case when dropped > 0 then win_start end as ts,
  case when dropped > 0 then win_end - win_start end as dur,
  cast(dropped as int) as dropped,
  recorded as recorded_switches,
  per_cpu as dropped_per_cpu
from _tl_de;
