-- GPU-driver ioctls (category 'ioctl', name = decoded request) by request and
-- device path: how many were slow, the worst, and who made them.
create or replace perfetto table _tl_io_any as
select s.ts, s.dur, s.name, tt.utid,
  coalesce(extract_arg(s.arg_set_id, 'debug.path'), extract_arg(s.arg_set_id, 'args.path'), '?') as path,
  coalesce(extract_arg(s.arg_set_id, 'debug.ret'), extract_arg(s.arg_set_id, 'args.ret')) as ret
from slice s join thread_track tt on s.track_id = tt.id
where s.category = 'ioctl';

-- Only GPU-driver ioctls: the family also records other devices' (ttys...).
-- Those made during their process' start-up (tl_startup: contexts, GPU
-- registration, first mappings; one-time costs) are reported apart.
create or replace perfetto table _tl_io as
select i.*, i.ts < coalesce((select s.end_ts from tl_startup s join thread t on t.upid = s.upid
                             where t.utid = i.utid), 0) as startup
from _tl_io_any i
where path glob '/dev/nvidia*' or path glob '/dev/dri/*' or path glob '/dev/kfd*'
   or name glob 'NV_*' or name glob 'UVM_*';

create or replace perfetto table _tl_io_g as
select name, path, count(*) as n, sum(dur >= ${slow_ms} * 1e6) as slow, max(dur) as mx, sum(dur) as total,
  sum(ret is not null and ret != 0) as failed,
  (select ts from _tl_io x where x.name = g.name and x.path = g.path and not x.startup
   order by dur desc limit 1) as worst_ts,
  (select utid from _tl_io x where x.name = g.name and x.path = g.path and not x.startup
   order by dur desc limit 1) as worst_utid
from _tl_io g where not startup group by name, path;

select
  case when mx >= ${error_ms} * 1e6 then 'error' else 'warning' end as severity,
  printf('%s on %s: %,d of %,d calls took >= %g ms (worst %.1f ms on %s (tid %d), %.2f s in all calls)%s',
         g.name, g.path, slow, n, ${slow_ms}, mx / 1e6, coalesce(t.name, '?'), t.tid, total / 1e9,
         iif(failed > 0, printf('; %,d returned an error', failed), '')) as finding,
  worst_ts as ts, mx as dur, null as hint,
  g.name as request, slow as slow_calls, round(mx / 1e6, 3) as max_ms
from _tl_io_g g join thread t on t.utid = g.worst_utid where slow > 0
union all
select 'ok', printf('%,d driver ioctls (%,d distinct requests), none slower than %g ms (max %.2f ms)', sum(n), count(*),
                    ${slow_ms}, max(mx) / 1e6), null, null, null, null, 0, round(max(mx) / 1e6, 3)
from _tl_io_g having sum(slow) = 0
union all
select 'info', printf('start-up (each process'' first CUDA call to the first launch of its last new kernel): '
                      || '%,d driver ioctls, %.2f s in all; the slowest %s on %s took %.1f ms (one-time set-up: '
                      || 'contexts, GPU registration, first mappings)', n, total / 1e9, name, path, mx / 1e6),
  ts, mx, null, name, null, round(mx / 1e6, 3)
from (select count(*) over () as n, sum(dur) over () as total, name, path, ts, dur as mx
      from _tl_io where startup order by dur desc limit 1)
union all
select 'n/a', printf('none of the %,d recorded ioctls went to a GPU driver (/dev/nvidia*, /dev/dri/*)', n),
  null, null, null, null, null, null
from (select count(*) as n from _tl_io_any) where not exists(select 1 from _tl_io);
