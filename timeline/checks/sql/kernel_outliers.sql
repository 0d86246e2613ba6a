-- GPU kernels that ran far longer than their own median (same kernel name),
-- in the steady state: contention on the GPU (other streams, another
-- process), clock throttling, or data-dependent work.
create or replace perfetto table _tl_ko as
select g.id, g.ts, g.dur, g.name, g.device from _tl_gpu g join tl_gpu_window w using (device)
where g.category = 'gpu_kernel' and g.ts >= w.ts;

create or replace perfetto table _tl_ko_stat as
select key as name, n, p50, p99, mx from _tl_percentiles!((select name as key, dur as val from _tl_ko))
where n >= ${min_runs};

-- With Python stacks taken at launches (the pystack family's `py` arg on the
-- launch slices, 1 launch in N), an outlier names the line that launched it:
-- the slice at the other end of its flow.
create or replace perfetto table _tl_ko_out as
select k.*, s.p50,
  (select _tl_py_line!(c.arg_set_id) from flow f join slice c on c.id = f.slice_out
   where f.slice_in = k.id order by c.ts limit 1) as py_line
from _tl_ko k join _tl_ko_stat s using (name)
where k.dur >= ${outlier_factor} * s.p50 and k.dur >= ${min_outlier_us} * 1000;

create or replace perfetto table _tl_ko_py as
select * from _tl_top_py_line!(_tl_ko_out);

select 'warning' as severity,
  printf('%s: %,d of %,d runs took over %gx its median (%.1f us); p99 %.1f us, worst %.2f ms', s.name, count(o.id),
         s.n, ${outlier_factor}, s.p50 / 1e3, s.p99 / 1e3, s.mx / 1e6)
    || iif(py.top_line is not null, printf('; launched from %s (%d of the %d outliers with a Python stack)',
                                           py.top_line, py.top_n, py.with_stack), '') as finding,
  min(o.ts) as ts, max(o.ts + o.dur) - min(o.ts) as dur, null as hint,
  s.name as kernel, count(o.id) as outliers, s.n as runs, round(s.p50 / 1e3, 3) as p50_us,
  round(s.mx / 1e3, 3) as max_us,
  py.top_line as python_line, round(1.0 * py.top_n / py.with_stack, 4) as python_share
from _tl_ko_stat s join _tl_ko_out o using (name) left join _tl_ko_py py on py.name = s.name group by s.name
union all
select * from (
  select 'info', printf('%s ran %.2f ms on GPU %d (%.0fx its median)', name, dur / 1e6, device, 1.0 * dur / p50)
      || iif(py_line is not null, printf('; launched from %s', py_line), ''),
    ts, dur, null, name, null, null, null, round(dur / 1e3, 3), py_line, null
  from _tl_ko_out order by dur desc limit cast(${max_outliers} as int))
union all
select 'ok', printf('%,d kernel runs of %,d kernels seen at least %d times, none over %gx its median',
                    sum(n), count(*), cast(${min_runs} as int), ${outlier_factor}),
  null, null, null, null, 0, sum(n), null, null, null, null
from _tl_ko_stat having count(*) > 0 and not exists(select 1 from _tl_ko_out)
union all
select 'n/a', 'no kernel ran often enough in the steady state to have a median', null, null, null, null, null,
  null, null, null, null, null
where not exists(select 1 from _tl_ko_stat) and not exists(select 1 from _tl_ko_out);
