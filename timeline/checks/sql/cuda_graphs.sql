-- CUDA graph captures/instantiations against launches, per process. When the
-- calls carry the executable graph handle (debug.exec) graphs are matched one
-- by one, else by count.
create or replace perfetto table _tl_cg_calls as
select upid, ts, dur,
  fn glob 'cu*StreamBeginCapture*' as is_capture,
  fn glob 'cu*GraphInstantiate*' as is_inst,
  fn in ('cudaGraphLaunch', 'cuGraphLaunch') as is_launch,
  fn glob 'cu*StreamBeginCapture*' or fn glob 'cu*StreamEndCapture*' or fn glob 'cu*GraphInstantiate*' as is_setup,
  coalesce(extract_arg(arg_set_id, 'debug.exec'), extract_arg(arg_set_id, 'args.exec')) as exec
from _tl_cuda where fn glob 'cu*Capture*' or fn glob 'cu*Graph*';

create or replace perfetto table _tl_cg as
select upid, sum(is_capture) as captures, sum(is_inst) as inst, sum(is_launch) as launches,
  sum(iif(is_setup, dur, 0)) as setup,
  min(iif(is_inst, ts, null)) as first_inst, max(iif(is_inst, ts + dur, null)) as last_inst,
  sum(is_inst and exec is not null) as inst_with_exec,
  sum(is_inst and exec is not null and exec not in (
        select l.exec from _tl_cg_calls l where l.is_launch and l.exec is not null and l.upid = c.upid)) as unlaunched
from _tl_cg_calls c group by upid;

create or replace perfetto table _tl_cg_v as
select *, iif(inst_with_exec > 0, unlaunched, iif(launches = 0, inst, 0)) as never,
  inst >= ${min_instantiations} and launches < ${min_replays} * inst as storm
from _tl_cg;

select
  iif(never > 0 or storm, 'warning', 'ok') as severity,
  printf('%s (pid %d): %,d captures, %,d graph instantiations, %,d graph launches (%.1f per instantiation); '
         || '%.1f ms spent capturing and instantiating', p.name, p.pid, captures, inst,
         launches, 1.0 * launches / max(inst, 1), setup / 1e6)
    || iif(never > 0, printf('; %,d instantiated graph%s never launched', never,
                             iif(never = 1, ' was', 's were')), '')
    || iif(storm, '; graphs are re-captured instead of replayed', '') as finding,
  first_inst as ts, last_inst - first_inst as dur,
  iif(never > 0 and not storm,
      'a graph that is never launched is pure capture cost: check the code path that should replay it', null)
    as hint,
  inst as instantiations, launches, never as never_launched, round(setup / 1e6, 3) as setup_ms
from _tl_cg_v join _tl_pname p using (upid) where inst > 0 or captures > 0
union all
select 'ok', 'no CUDA graphs captured or launched', null, null, null, 0, 0, 0, 0
where not exists(select 1 from _tl_cg where inst > 0 or captures > 0);
