-- Which rank the others wait for.  Works without knowing the collectives
-- (gloo on CPU, NCCL, anything): every long wait (S or D for at least
-- min_wait_ms) of a rank's main thread is blamed on the other rank that was
-- busiest (running or runnable) during it, if that rank was busy for at least
-- half of it.  In a collective round the ranks that arrived first wait; the
-- one still computing is the last to arrive.

-- Ranks: the labels timeline writes on ranked processes (rank=N); the main
-- thread is the process's first thread (tid = pid), where torch calls the collectives.
create or replace perfetto table _tl_rs_ranks as
select p.upid, p.pid, t.utid, cast(substr(a.display_value, 6) as int) as rank
from process p join args a on a.arg_set_id = p.arg_set_id
join thread t on t.upid = p.upid and t.tid = p.pid
where a.key glob 'chrome.process_label*' and a.display_value glob 'rank=*';

create or replace perfetto table _tl_rs_states as
select r.rank, s.ts, s.dur, s.state from thread_state s join _tl_rs_ranks r using (utid) where s.dur > 0;

create or replace perfetto table _tl_rs_waits as
select row_number() over (order by ts) as wid, rank, ts, dur from _tl_rs_states
where state in ('S', 'D') and dur >= ${min_wait_ms} * 1e6;

-- Busy time of every other rank during each wait (interval overlap).
create or replace perfetto table _tl_rs_busy as
select w.wid, w.rank as waiter, s.rank as other, w.dur as wait,
  sum(min(s.ts + s.dur, w.ts + w.dur) - max(s.ts, w.ts)) as busy
from _tl_rs_waits w join _tl_rs_states s
  on s.rank != w.rank and s.ts < w.ts + w.dur and s.ts + s.dur > w.ts and s.state in ('Running', 'R', 'R+')
group by w.wid, s.rank;

create or replace perfetto table _tl_rs_blame as
select wid, waiter, other as blamed, wait, busy from (
  select *, row_number() over (partition by wid order by busy desc) as k from _tl_rs_busy)
where k = 1 and busy >= 0.5 * wait;

create or replace perfetto table _tl_rs_per_rank as
select b.blamed as rank, count(*) as n, sum(b.wait) as waited,
  (select count(*) from _tl_rs_waits) as all_waits,
  (select sum(dur) from _tl_rs_waits) as all_waited
from _tl_rs_blame b group by b.blamed;

-- Median wait blamed on each rank (nearest rank).
create or replace perfetto table _tl_rs_median as
select blamed as rank, wait as median from (
  select blamed, wait, row_number() over (partition by blamed order by wait) as k,
    count(*) over (partition by blamed) as n from _tl_rs_blame)
where k = (n + 1) / 2;

-- What the straggler was doing while the others waited for it.
create or replace perfetto table _tl_rs_doing as
select b.blamed as rank,
  sum(iif(s.state = 'Running', min(s.ts + s.dur, w.ts + w.dur) - max(s.ts, w.ts), 0)) as running,
  sum(iif(s.state in ('R', 'R+'), min(s.ts + s.dur, w.ts + w.dur) - max(s.ts, w.ts), 0)) as runnable,
  sum(iif(s.state = 'D', min(s.ts + s.dur, w.ts + w.dur) - max(s.ts, w.ts), 0)) as disk,
  sum(iif(s.state = 'S', min(s.ts + s.dur, w.ts + w.dur) - max(s.ts, w.ts), 0)) as sleeping
from _tl_rs_blame b join _tl_rs_waits w using (wid)
join _tl_rs_states s on s.rank = b.blamed and s.ts < w.ts + w.dur and s.ts + s.dur > w.ts
group by b.blamed;

create or replace perfetto table _tl_rs as
select r.rank, (select pid from _tl_rs_ranks x where x.rank = r.rank limit 1) as pid, r.n, r.waited, r.all_waits,
  r.all_waited, m.median, d.running, d.runnable, d.disk, d.sleeping,
  1.0 * r.waited / max(1, r.all_waited) as share
from _tl_rs_per_rank r join _tl_rs_median m using (rank) join _tl_rs_doing d using (rank);

create or replace perfetto table _tl_rs_named as
select * from _tl_rs
where n >= ${min_rounds} and share >= ${share_warn} and waited >= ${min_wait_ms} * 1e6 * ${min_rounds};

select * from (select 'warning' as severity,
  printf('rank %d (pid %d) kept the other ranks waiting: %d of their %d waits of >= %g ms were for it, %.2f s in '
         || 'all (%.0f%% of all their waiting; median %.1f ms a round); meanwhile it was running %.0f%%, runnable '
         || '%.0f%%, in disk wait %.0f%%, asleep %.0f%%',
         rank, pid, n, all_waits, ${min_wait_ms}, waited / 1e9, 100.0 * share, median / 1e6,
         100.0 * running / max(1, running + runnable + disk + sleeping),
         100.0 * runnable / max(1, running + runnable + disk + sleeping),
         100.0 * disk / max(1, running + runnable + disk + sleeping),
         100.0 * sleeping / max(1, running + runnable + disk + sleeping)) as finding,
  null as ts, null as dur, null as hint,
  rank, n as rounds_last, round(waited / 1e6, 3) as waited_ms, round(median / 1e6, 3) as median_ms,
  round(share, 4) as share
from _tl_rs_named order by waited desc limit 3)
union all
select 'ok', printf('%d ranks, none kept the others waiting: of %d waits of >= %g ms, the most on one rank were '
                    || '%.0f%% (rank %s; a straggler from %.0f%%)',
                    (select count(*) from _tl_rs_ranks), (select count(*) from _tl_rs_waits), ${min_wait_ms},
                    100.0 * coalesce((select max(share) from _tl_rs), 0),
                    coalesce((select cast(rank as text) from _tl_rs order by share desc limit 1), '-'),
                    100.0 * ${share_warn}),
  null, null, null, null, null, null, null, null
where (select count(*) from _tl_rs_ranks) >= 2 and not exists(select 1 from _tl_rs_named)
union all
select 'n/a', 'fewer than two ranked processes (RANK / OMPI_COMM_WORLD_RANK / PMI_RANK / SLURM_PROCID) in this trace',
  null, null, null, null, null, null, null, null
where (select count(*) from _tl_rs_ranks) < 2;
