-- TCP retransmits of the recorded connections (net family instants, on the
-- thread that last used the socket) and what the owning process was waiting
-- for at the time: a collective (an NCCL call of the process spans it, or its
-- main thread -- the leader, where torch calls the collectives -- was asleep),
-- or its DataLoader (the connection belongs to a worker process while the
-- main training thread was asleep).  Tail loss probes (a retransmit with no
-- loss seen: ca_state open/disorder/cwr) are counted apart: they happen on
-- clean links too.
create or replace perfetto table _tl_nr as
select s.ts, t.upid, coalesce(t.name, '?') as thread, t.tid, p.pid,
  cast(coalesce(extract_arg(s.arg_set_id, 'debug.conn'), extract_arg(s.arg_set_id, 'args.conn')) as text) as conn,
  cast(coalesce(extract_arg(s.arg_set_id, 'debug.peer'), extract_arg(s.arg_set_id, 'args.peer')) as text) as peer,
  coalesce(extract_arg(s.arg_set_id, 'debug.lost'), extract_arg(s.arg_set_id, 'args.lost'), 1) as lost,
  coalesce(extract_arg(s.arg_set_id, 'debug.rto'), extract_arg(s.arg_set_id, 'args.rto'), 0) as rto,
  coalesce(extract_arg(s.arg_set_id, 'debug.srtt_ms'), extract_arg(s.arg_set_id, 'args.srtt_ms'), 0) as srtt_ms
from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid) left join process p using (upid)
where s.category = 'net' and s.name = 'tcp retransmit';

-- The main thread of each process with retransmits (tid = pid; the utid with
-- the scheduling data where trace_processor split it).
create or replace perfetto table _tl_nr_main as
select p.upid, (select x.utid from thread x left join _tl_run r using (utid)
                where x.upid = p.upid and x.tid = p.pid order by coalesce(r.run_ns, 0) desc limit 1) as utid
from process p where p.upid in (select upid from _tl_nr);

create or replace perfetto table _tl_nr_where as
select n.*,
  case
    when n.upid in (select upid from _tl_workers) then
      iif(exists(select 1 from thread_state st where st.utid = (select utid from tl_main_thread)
                 and st.ts <= n.ts and n.ts < st.ts + st.dur and (st.state = 'S' or st.state glob 'D*')),
          'dataloader', 'other')
    when exists(select 1 from _tl_cuda c where c.upid = n.upid and c.category = 'nccl'
                and c.ts <= n.ts and n.ts < c.ts + c.dur) then 'collective'
    when exists(select 1 from thread_state st join _tl_nr_main m on st.utid = m.utid
                where m.upid = n.upid and st.ts <= n.ts and n.ts < st.ts + st.dur
                  and (st.state = 'S' or st.state glob 'D*')) then 'collective'
    else 'other' end as during
from _tl_nr n;

create or replace perfetto table _tl_nr_conn as
select upid, pid, conn, peer,
  (select rank from _tl_ranks r where r.upid = w.upid) as rank,
  count(*) as n, sum(lost != 0) as lost, sum(rto != 0) as rto,
  sum(lost != 0 and during = 'collective') as in_coll, sum(lost != 0 and during = 'dataloader') as in_loader,
  max(srtt_ms) as srtt_max, min(ts) as ts, max(ts) - min(ts) as dur,
  (select group_concat(distinct x.thread) from _tl_nr x where x.upid = w.upid and x.conn = w.conn) as threads
from _tl_nr_where w group by upid, conn;

select * from (
  select iif(in_coll + in_loader >= ${min_retransmits}, 'warning', 'info') as severity,
    printf('connection %s (pid %d%s, threads %s): %d retransmits after a loss (%d after a timeout, an RTO)%s%s, '
           || 'srtt up to %.1f ms; peer %s',
           conn, pid, iif(rank is not null, ', rank ' || rank, ''), threads, lost, rto,
           iif(in_coll > 0, printf(', %d while the process waited in a collective', in_coll), ''),
           iif(in_loader > 0, printf(', %d while the main thread waited for its DataLoader', in_loader), ''),
           srtt_max, peer) as finding,
    ts, dur, null as hint,
    conn, peer, rank, lost as retransmits, rto as rtos, in_coll as in_collective, in_loader as in_dataloader,
    round(srtt_max, 3) as srtt_max_ms
  from _tl_nr_conn where lost > 0 order by in_coll + in_loader desc, lost desc limit 10)
union all
select 'ok',
  printf('no TCP retransmits after a loss on the recorded connections (%d tail loss probes)',
         (select count(*) from _tl_nr where lost = 0)),
  null, null, null, null, null, null, null, null, null, null, null
where not exists(select 1 from _tl_nr where lost != 0);
