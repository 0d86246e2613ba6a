-- Per rank: how its main thread spent the time all ranks were alive (running,
-- runnable, waiting), and how far apart their running times are (runnable is
-- not work: on an oversubscribed host every rank waits for a CPU).  In data-parallel
-- training every rank does the same work per step: busy times far apart mean
-- an uneven split (data, sequence lengths, a slower device or host).

-- The span every rank's main thread was alive
create or replace perfetto table _tl_ri_span as
select max(t0) as t0, min(t1) as t1 from (
  select r.rank, min(s.ts) as t0, max(s.ts + s.dur) as t1
  from thread_state s join _tl_ranks r using (utid) where s.dur > 0 group by r.rank);

create or replace perfetto table _tl_ri as
select r.rank, r.pid,
  sum(iif(s.state = 'Running', min(s.ts + s.dur, p.t1) - max(s.ts, p.t0), 0)) as running,
  sum(iif(s.state in ('R', 'R+'), min(s.ts + s.dur, p.t1) - max(s.ts, p.t0), 0)) as runnable,
  sum(iif(s.state in ('S', 'D'), min(s.ts + s.dur, p.t1) - max(s.ts, p.t0), 0)) as waiting,
  p.t1 - p.t0 as span
from _tl_ranks r join thread_state s using (utid) join _tl_ri_span p
where s.dur > 0 and s.ts < p.t1 and s.ts + s.dur > p.t0
group by r.rank;

-- Step time: the period between the lowest rank's waits of >= 1 ms (a
-- synchronous job waits once per collective round), p50 and p90.
create or replace perfetto table _tl_ri_steps as
select period, row_number() over (order by period) as k, count(*) over () as n from (
  select (s.ts + s.dur) - lag(s.ts + s.dur) over (order by s.ts) as period
  from thread_state s join _tl_ranks r using (utid)
  where r.rank = (select min(rank) from _tl_ranks) and s.state in ('S', 'D') and s.dur >= 1e6)
where period is not null;

create or replace perfetto table _tl_ri_spread as
select min(running) as lo, max(running) as hi, count(*) as n from _tl_ri;

select
  case when (select n from _tl_ri_spread) >= 2
            and (select hi - lo from _tl_ri_spread) >= ${spread_warn} * (select hi from _tl_ri_spread)
       then 'warning' else 'ok' end as severity,
  printf('%d ranks over %.2f s: main threads running from %.2f s to %.2f s, a spread of %.0f%% of the busiest; '
         || 'the least busy ranks spend the difference waiting for the others',
         (select n from _tl_ri_spread), (select t1 - t0 from _tl_ri_span) / 1e9,
         (select lo from _tl_ri_spread) / 1e9, (select hi from _tl_ri_spread) / 1e9,
         100.0 * (select hi - lo from _tl_ri_spread) / max(1, (select hi from _tl_ri_spread)))
    || iif((select hi - lo from _tl_ri_spread) >= ${spread_warn} * (select hi from _tl_ri_spread), '', ' (balanced)')
    || coalesce((select printf('; step time p50 %.1f ms, p90 %.1f ms over %d steps (between rank %d''s waits)',
                               (select period from _tl_ri_steps where k = (n + 1) / 2) / 1e6,
                               (select period from _tl_ri_steps where k = max(1, cast(0.9 * n as int))) / 1e6,
                               (select max(n) from _tl_ri_steps), (select min(rank) from _tl_ranks))
                 where (select count(*) from _tl_ri_steps) >= 5), '')
    as finding,
  (select t0 from _tl_ri_span) as ts, (select t1 - t0 from _tl_ri_span) as dur, null as hint,
  null as rank, round(1.0 * (select hi - lo from _tl_ri_spread) / max(1, (select hi from _tl_ri_spread)), 4) as spread,
  null as busy_fraction, null as waiting_fraction
where (select n from _tl_ri_spread) >= 2
union all
select * from (
  select 'info', printf('rank %d (pid %d): running %.0f%%, runnable %.0f%%, waiting %.0f%%', rank, pid,
                        100.0 * running / span, 100.0 * runnable / span, 100.0 * waiting / span),
    null, null, null, rank, null, round(1.0 * running / span, 4), round(1.0 * waiting / span, 4)
  from _tl_ri where (select n from _tl_ri_spread) >= 2 order by rank)
union all
select 'n/a', 'fewer than two ranked processes (RANK / OMPI_COMM_WORLD_RANK / PMI_RANK / SLURM_PROCID) in this trace',
  null, null, null, null, null, null, null
where (select count(*) from _tl_ranks) < 2;
