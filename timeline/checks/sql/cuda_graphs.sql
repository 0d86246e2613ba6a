-- CUDA graph captures/instantiations against launches, per process. When the
-- calls carry the executable graph handle (debug.exec) graphs are matched one
-- by one, else by count.
--
-- Map-reduce form (checks/traceset.py): above the @reduce line runs per chunk
-- of a trace set and leaves per-process sums and the graph handles
-- instantiated and launched; a call cut at a chunk boundary is counted where it
-- began (debug.timeline_cut 'start' or 'both': it began in an earlier chunk).
-- Processes are told apart by pid and name.
create or replace perfetto table _tl_cg_calls as
select upid, ts, dur,
  fn glob 'cu*StreamBeginCapture*' as is_capture,
  fn glob 'cu*GraphInstantiate*' as is_inst,
  fn in ('cudaGraphLaunch', 'cuGraphLaunch') as is_launch,
  fn glob 'cu*StreamBeginCapture*' or fn glob 'cu*StreamEndCapture*' or fn glob 'cu*GraphInstantiate*' as is_setup,
  coalesce(extract_arg(arg_set_id, 'debug.exec'), extract_arg(arg_set_id, 'args.exec')) as exec,
  coalesce(extract_arg(arg_set_id, 'debug.timeline_cut'), extract_arg(arg_set_id, 'args.timeline_cut'), '')
    not in ('start', 'both') as began
from _tl_cuda where fn glob 'cu*Capture*' or fn glob 'cu*Graph*';

create or replace perfetto table _tl_cg_part as
select 'proc' as kind, p.pid, p.name, sum(is_capture and began) as captures, sum(is_inst and began) as inst,
  sum(is_launch and began) as launches, sum(iif(is_setup, dur, 0)) as setup,
  min(iif(is_inst and began, ts, null)) as first_inst, max(iif(is_inst, ts + dur, null)) as last_inst,
  null as exec
from _tl_cg_calls c join _tl_pname p using (upid) group by c.upid
union all
select iif(is_inst, 'inst', 'launch'), p.pid, p.name, null, sum(began), null, null, null, null, exec
from _tl_cg_calls c join _tl_pname p using (upid)
where (is_inst or is_launch) and exec is not null group by c.upid, is_inst, exec;

-- @reduce _tl_cg_part
create or replace perfetto table _tl_cg as
select pid, name, sum(captures) as captures, sum(inst) as inst, sum(launches) as launches, sum(setup) as setup,
  min(first_inst) as first_inst, max(last_inst) as last_inst,
  coalesce((select sum(i.inst) from _tl_cg_part i where i.kind = 'inst' and i.pid = c.pid and i.name = c.name), 0)
    as inst_with_exec,
  coalesce((select sum(i.inst) from _tl_cg_part i where i.kind = 'inst' and i.pid = c.pid and i.name = c.name
            and i.exec not in (select l.exec from _tl_cg_part l
                               where l.kind = 'launch' and l.pid = c.pid and l.name = c.name)), 0) as unlaunched
from _tl_cg_part c where kind = 'proc' group by pid, name;

create or replace perfetto table _tl_cg_v as
select *, iif(inst_with_exec > 0, unlaunched, iif(launches = 0, inst, 0)) as never,
  inst >= ${min_instantiations} and launches < ${min_replays} * inst as storm
from _tl_cg;

select * from (
select
  iif(never > 0 or storm, 'warning', 'ok') as severity,
  printf('%s (pid %d): %,d captures, %,d graph instantiations, %,d graph launches (%.1f per instantiation); '
         || '%.1f ms spent capturing and instantiating', name, pid, captures, inst,
         launches, 1.0 * launches / max(inst, 1), setup / 1e6)
    || iif(never > 0, printf('; %,d instantiated graph%s never launched', never,
                             iif(never = 1, ' was', 's were')), '')
    || iif(storm, '; graphs are re-captured instead of replayed', '') as finding,
  first_inst as ts, last_inst - first_inst as dur,
  iif(never > 0 and not storm,
      'a graph that is never launched is pure capture cost: check the code path that should replay it', null)
    as hint,
  inst as instantiations, launches, never as never_launched, round(setup / 1e6, 3) as setup_ms
from _tl_cg_v where inst > 0 or captures > 0 order by pid, name)
union all
select 'ok', 'no CUDA graphs captured or launched', null, null, null, 0, 0, 0, 0
where not exists(select 1 from _tl_cg where inst > 0 or captures > 0);
