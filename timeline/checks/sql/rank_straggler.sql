-- Which rank the others wait for.  Works without knowing the collectives
-- (gloo on CPU, NCCL, anything): every long wait (S or D for at least
-- min_wait_ms) of a rank's main thread is blamed on the other rank that was
-- running longest during it, if it ran for at least half of it (runnable is
-- not computing).  In a collective round the ranks that arrived first wait;
-- the one still computing is the last to arrive.  Ranks and their main
-- threads: _tl_ranks (the prelude).  Waits that no computing rank explains
-- are on the network when the net family saw the waiter's connections
-- retransmit (or their RTT high) meanwhile: a lossy link stalls every rank.

-- With NCCL collectives recorded (cuda family), rounds are the collectives
-- themselves: the k-th collective call of every rank is one round (ranks call
-- them in the same order), and the rank that enters it last is the straggler
-- of that round, late by the gap to the next-latest rank.
create or replace perfetto table _tl_rs_coll as
select r.rank, s.ts, row_number() over (partition by r.rank order by s.ts) as k
from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
join _tl_ranks r on r.upid = t.upid
where s.category = 'nccl'
  and s.name in ('ncclAllReduce', 'ncclReduceScatter', 'ncclAllGather', 'ncclBroadcast', 'ncclBcast', 'ncclReduce');

create or replace perfetto table _tl_rs_rounds as
select k from _tl_rs_coll group by k having count(distinct rank) = (select count(*) from _tl_ranks);

create or replace perfetto table _tl_rs_arrivals as
select c.k, c.rank, c.ts, row_number() over (partition by c.k order by c.ts desc) as pos
from _tl_rs_coll c join _tl_rs_rounds using (k);

create or replace perfetto table _tl_rs_coll_last as
select a.k, a.rank, a.ts, a.ts - b.ts as late
from _tl_rs_arrivals a join _tl_rs_arrivals b on b.k = a.k and b.pos = 2
where a.pos = 1;

create or replace perfetto table _tl_rs_coll_per_rank as
select rank, count(*) as n, sum(late) as waited, (select count(*) from _tl_rs_rounds) as rounds from _tl_rs_coll_last
group by rank;

create or replace perfetto table _tl_rs_coll_median as
select rank, late as median from (
  select rank, late, row_number() over (partition by rank order by late) as i, count(*) over (partition by rank) as m
  from _tl_rs_coll_last) where i = (m + 1) / 2;

create or replace perfetto table _tl_rs_states as
select r.rank, s.ts, s.dur, s.state from thread_state s join _tl_ranks r using (utid) where s.dur > 0;

create or replace perfetto table _tl_rs_waits as
select row_number() over (order by ts) as wid, rank, ts, dur from _tl_rs_states
where state in ('S', 'D') and dur >= ${min_wait_ms} * 1e6;

-- Busy time of every other rank during each wait (interval overlap).
create or replace perfetto table _tl_rs_busy as
select w.wid, w.rank as waiter, s.rank as other, w.dur as wait,
  sum(min(s.ts + s.dur, w.ts + w.dur) - max(s.ts, w.ts)) as busy
from _tl_rs_waits w join _tl_rs_states s
  on s.rank != w.rank and s.ts < w.ts + w.dur and s.ts + s.dur > w.ts and s.state = 'Running'
group by w.wid, s.rank;

-- (Ties go to the lowest rank, here and in the lists below: the trace's content, never the
-- engine's row order, picks; partials/rank_straggler.py does the same.)
create or replace perfetto table _tl_rs_blame as
select wid, waiter, other as blamed, wait, busy from (
  select *, row_number() over (partition by wid order by busy desc, other) as k from _tl_rs_busy)
where k = 1 and busy >= 0.5 * wait;

-- Per blamed rank: against the waits of the other ranks (its own are not
-- about it): how many of them, and how much of their time, were for it.
create or replace perfetto table _tl_rs_per_rank as
select b.blamed as rank, count(*) as n, sum(b.wait) as waited,
  (select count(*) from _tl_rs_waits w where w.rank != b.blamed) as all_waits,
  (select sum(dur) from _tl_rs_waits w where w.rank != b.blamed) as all_waited
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

-- Its DataLoader: time its worker processes ran during those waits, counted
-- against the straggler's own sleep (asleep while its workers produce a batch
-- is waiting for input).
create or replace perfetto table _tl_rs_loader as
select b.blamed as rank,
  sum(min(s.ts + s.dur, w.ts + w.dur) - max(s.ts, w.ts)) as loader_running
from _tl_rs_blame b join _tl_rs_waits w using (wid)
join _tl_ranks r on r.rank = b.blamed
join process wp on wp.parent_upid = r.upid and wp.upid in (select upid from _tl_workers)
join thread wt on wt.upid = wp.upid
join thread_state s on s.utid = wt.utid and s.state = 'Running' and s.ts < w.ts + w.dur and s.ts + s.dur > w.ts
group by b.blamed;

-- The network (net family): retransmits after a loss on the ranks'
-- connections, each on both ranks it joins: the process that owns the
-- connection and the rank whose own connection is its mirror (local and peer
-- swapped; a merged trace or one recording of the whole job has both ends).
create or replace perfetto table _tl_rs_rtx as
select s.id, s.ts, r.rank,
  cast(coalesce(extract_arg(s.arg_set_id, 'debug.local'), extract_arg(s.arg_set_id, 'args.local')) as text) as local,
  cast(coalesce(extract_arg(s.arg_set_id, 'debug.peer'), extract_arg(s.arg_set_id, 'args.peer')) as text) as peer,
  coalesce(extract_arg(s.arg_set_id, 'debug.srtt_ms'), extract_arg(s.arg_set_id, 'args.srtt_ms'), 0) as srtt_ms
from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid) join _tl_ranks r on r.upid = t.upid
where s.category = 'net' and s.name = 'tcp retransmit'
  and coalesce(extract_arg(s.arg_set_id, 'debug.lost'), extract_arg(s.arg_set_id, 'args.lost'), 1) != 0;

create or replace perfetto table _tl_rs_rtx_rank as
select id, ts, rank, srtt_ms, local, peer from _tl_rs_rtx
union
select x.id, x.ts, r.rank, x.srtt_ms, x.local, x.peer from _tl_rs_rtx x
join process_counter_track pt
  on substr(pt.name, 1, length(x.peer) + length(x.local) + 8) = 'net ' || x.peer || ' ' || char(8596) || ' ' || x.local || ' '
join _tl_ranks r on r.upid = pt.upid;

-- RTT samples of the ranks' own connections ('net <local> ↔ <peer> srtt_ms').
create or replace perfetto table _tl_rs_rtt as
select r.rank, c.ts, c.value as srtt_ms
from counter c join process_counter_track pt on c.track_id = pt.id join _tl_ranks r on r.upid = pt.upid
where pt.name glob 'net * srtt_ms';

-- Waits no computing rank explains, spent while the waiter's connections
-- retransmitted or had a high RTT: waiting on the network.
create or replace perfetto table _tl_rs_net_waits as
select w.wid, w.rank, w.dur,
  (select count(distinct x.id) from _tl_rs_rtx_rank x where x.rank = w.rank and x.ts >= w.ts and x.ts < w.ts + w.dur)
    as retransmits,
  max(coalesce((select max(x.srtt_ms) from _tl_rs_rtx_rank x
                where x.rank = w.rank and x.ts >= w.ts and x.ts < w.ts + w.dur), 0),
      coalesce((select max(c.srtt_ms) from _tl_rs_rtt c
                where c.rank = w.rank and c.ts >= w.ts and c.ts < w.ts + w.dur), 0)) as srtt_ms
from _tl_rs_waits w
where w.wid not in (select wid from _tl_rs_blame);

create or replace perfetto table _tl_rs_net as
select count(*) as n, sum(w.dur) as waited, (select count(*) from _tl_rs_waits) as all_waits,
  (select sum(dur) from _tl_rs_waits) as all_waited, max(w.srtt_ms) as srtt_ms,
  (select count(distinct x.id) from _tl_rs_rtx_rank x join _tl_rs_waits v using (rank)
   where v.wid in (select wid from _tl_rs_net_waits where retransmits > 0 or srtt_ms >= ${net_rtt_ms})
     and x.ts >= v.ts and x.ts < v.ts + v.dur) as retransmits
from _tl_rs_net_waits w where w.retransmits > 0 or w.srtt_ms >= ${net_rtt_ms};

-- The connection that retransmitted most during those waits, with the rank at each end.
create or replace perfetto table _tl_rs_net_conn as
select x.rank, x.local, x.peer, count(distinct x.id) as n,
  (select r.rank from process_counter_track pt join _tl_ranks r on r.upid = pt.upid
   where substr(pt.name, 1, length(x.peer) + length(x.local) + 8)
         = 'net ' || x.peer || ' ' || char(8596) || ' ' || x.local || ' ' limit 1) as peer_rank
from _tl_rs_rtx x join _tl_rs_waits v on v.rank = x.rank and x.ts >= v.ts and x.ts < v.ts + v.dur
where v.wid in (select wid from _tl_rs_net_waits where retransmits > 0 or srtt_ms >= ${net_rtt_ms})
group by x.rank, x.local, x.peer order by n desc limit 1;

create or replace perfetto table _tl_rs_net_named as
select * from _tl_rs_net
where n >= ${min_rounds} and 1.0 * waited / max(1, all_waited) >= ${net_share_warn};

-- Per straggler: the network and memory pressure during the waits blamed on
-- it (its retransmits, the highest RTT; its threads' reclaim and compaction
-- stalls, memory family).
create or replace perfetto table _tl_rs_strag_net as
select b.blamed as rank, count(distinct x.id) as retransmits, max(x.srtt_ms) as srtt_ms
from _tl_rs_blame b join _tl_rs_waits w using (wid)
join _tl_rs_rtx_rank x on x.rank = b.blamed and x.ts >= w.ts and x.ts < w.ts + w.dur
group by b.blamed;

create or replace perfetto table _tl_rs_strag_mem as
select b.blamed as rank, sum(min(s.ts + s.dur, w.ts + w.dur) - max(s.ts, w.ts)) as reclaim
from _tl_rs_blame b join _tl_rs_waits w using (wid)
join _tl_ranks r on r.rank = b.blamed
join thread t on t.upid = r.upid
join thread_track tt on tt.utid = t.utid
join slice s on s.track_id = tt.id and s.category = 'memory'
  and s.name in ('direct reclaim', 'memcg reclaim', 'compaction') and s.ts < w.ts + w.dur and s.ts + s.dur > w.ts
group by b.blamed;

create or replace perfetto table _tl_rs as
select r.rank, (select pid from _tl_ranks x where x.rank = r.rank limit 1) as pid, r.n, r.waited, r.all_waits,
  r.all_waited, m.median, d.running, d.runnable, d.disk,
  d.sleeping - min(d.sleeping, coalesce(l.loader_running, 0)) as sleeping,
  min(d.sleeping, coalesce(l.loader_running, 0)) as loader,
  1.0 * r.waited / max(1, r.all_waited) as share,
  coalesce(sn.retransmits, 0) as retransmits, sn.srtt_ms, coalesce(sm.reclaim, 0) as reclaim
from _tl_rs_per_rank r join _tl_rs_median m using (rank) join _tl_rs_doing d using (rank)
left join _tl_rs_loader l using (rank) left join _tl_rs_strag_net sn using (rank)
left join _tl_rs_strag_mem sm using (rank);

create or replace perfetto table _tl_rs_named as
select * from _tl_rs
where n >= ${min_rounds} and share >= ${share_warn} and n >= ${rounds_warn} * all_waits
  and waited >= ${min_wait_ms} * 1e6 * ${min_rounds}
  and not exists(select 1 from _tl_rs_rounds);

create or replace perfetto table _tl_rs_coll_named as
select c.rank, (select pid from _tl_ranks x where x.rank = c.rank limit 1) as pid, c.n, c.waited, c.rounds,
  m.median, 1.0 * c.n / c.rounds as share
from _tl_rs_coll_per_rank c join _tl_rs_coll_median m using (rank)
where c.n >= ${min_rounds} and 1.0 * c.n / c.rounds >= ${rounds_warn} and m.median >= ${min_wait_ms} * 1e6;

select * from (select 'warning' as severity,
  printf('rank %d (pid %d) kept the other ranks waiting: %d of their %d waits of >= %g ms were for it, %.2f s in '
         || 'all (%.0f%% of all their waiting; median %.1f ms a round); meanwhile it was running %.0f%%, runnable '
         || '%.0f%%, in disk wait %.0f%%, waiting for its DataLoader %.0f%%, asleep otherwise %.0f%%',
         rank, pid, n, all_waits, ${min_wait_ms}, waited / 1e9, 100.0 * share, median / 1e6,
         100.0 * running / max(1, running + runnable + disk + loader + sleeping),
         100.0 * runnable / max(1, running + runnable + disk + loader + sleeping),
         100.0 * disk / max(1, running + runnable + disk + loader + sleeping),
         100.0 * loader / max(1, running + runnable + disk + loader + sleeping),
         100.0 * sleeping / max(1, running + runnable + disk + loader + sleeping))
    || iif(reclaim > 0, printf('; in memory reclaim or compaction %.0f%% of the time',
                               100.0 * reclaim / max(1, running + runnable + disk + loader + sleeping)), '')
    || iif(retransmits > 0, printf('; waiting on the network (%d retransmits, RTT up to %.1f ms)',
                                   retransmits, srtt_ms), '') as finding,
  null as ts, null as dur, null as hint,
  rank, n as rounds_last, round(waited / 1e6, 3) as waited_ms, round(median / 1e6, 3) as median_ms,
  round(share, 4) as share, retransmits, round(srtt_ms, 3) as srtt_max_ms, round(reclaim / 1e6, 3) as reclaim_ms
from _tl_rs_named order by waited desc, rank limit 3)
union all
select * from (select 'warning',
  printf('rank %d (pid %d) entered the collectives last: in %d of %d NCCL rounds (the k-th collective call of '
         || 'every rank), late by %.1f ms (median) behind the next-latest rank, %.2f s in all',
         rank, pid, n, rounds, median / 1e6, waited / 1e9),
  null, null, null, rank, n, round(waited / 1e6, 3), round(median / 1e6, 3), round(share, 4), null, null, null
from _tl_rs_coll_named order by n desc, rank limit 3)
union all
select 'warning',
  printf('the ranks were waiting on the network (%d retransmits, RTT up to %.1f ms): %d of their %d waits of '
         || '>= %g ms, %.2f s in all (%.0f%% of all their waiting), with no rank computing meanwhile and '
         || 'retransmits or an RTT of >= %g ms on the waiting rank''s connections%s',
         n.retransmits, n.srtt_ms, n.n, n.all_waits, ${min_wait_ms}, n.waited / 1e9,
         100.0 * n.waited / max(1, n.all_waited), ${net_rtt_ms},
         coalesce((select printf('; most of them (%d) on rank %d''s connection %s ' || char(8596) || ' %s%s',
                                 c.n, c.rank, c.local, c.peer,
                                 iif(c.peer_rank is not null, ' to rank ' || c.peer_rank, ''))
                   from _tl_rs_net_conn c), '')),
  null, null,
  'Look at the network path between the ranks (net_retransmits names the connections, net_throughput the slow '
    || 'ones): a lossy or congested link, a NIC dropping packets, a mis-sized MTU or receive buffer.',
  (select rank from _tl_rs_net_conn), n.n, round(n.waited / 1e6, 3), null,
  round(1.0 * n.waited / max(1, n.all_waited), 4), n.retransmits, round(n.srtt_ms, 3), null
from _tl_rs_net_named n
union all
select 'ok', printf('%d ranks, none kept the others waiting: of %d waits of >= %g ms, the most on one rank were '
                    || '%.0f%% (rank %s; a straggler from %.0f%%)',
                    (select count(*) from _tl_ranks), (select count(*) from _tl_rs_waits), ${min_wait_ms},
                    100.0 * coalesce((select max(share) from _tl_rs), 0),
                    coalesce((select cast(rank as text) from _tl_rs order by share desc, rank limit 1), '-'),
                    100.0 * ${share_warn}),
  null, null, null, null, null, null, null, null, null, null, null
where (select count(*) from _tl_ranks) >= 2 and not exists(select 1 from _tl_rs_named)
  and not exists(select 1 from _tl_rs_coll_named) and not exists(select 1 from _tl_rs_net_named)
union all
select 'n/a', 'fewer than two ranked processes (RANK / OMPI_COMM_WORLD_RANK / PMI_RANK / SLURM_PROCID) in this trace',
  null, null, null, null, null, null, null, null, null, null, null
where (select count(*) from _tl_ranks) < 2;
