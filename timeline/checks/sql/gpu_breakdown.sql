-- Where each GPU's time went in the steady state: compute kernels,
-- communication (NCCL) kernels not hidden behind compute, copies/memsets
-- alone, idle; per step when the main thread marks steps with an NVTX range
-- (the range name it repeats most at the top level of its NVTX ranges, by
-- total time).
-- Top level among NVTX ranges: no NVTX range encloses it (the main thread's
-- role slice, category dataloader, encloses them all).
create or replace perfetto table _tl_gb_nvtx as
select s.id, s.ts, s.dur, s.name from slice s join thread_track tt on s.track_id = tt.id
where s.category = 'nvtx' and tt.utid = (select utid from tl_main_thread)
  and not exists (select 1 from ancestor_slice(s.id) a where a.category = 'nvtx');

create or replace perfetto table _tl_gb_stepname as
select name from _tl_gb_nvtx group by name having count(*) >= 3 order by sum(dur) desc limit 1;

create or replace perfetto table _tl_gb_steps as
select ts, dur, row_number() over (order by ts) as step from _tl_gb_nvtx
where name = (select name from _tl_gb_stepname);

-- Per step and device: the share of the step the device was idle, from each
-- device's cumulative busy time at the step's start and end. The boundaries
-- and the device's segments are sorted together, in one ordered pass: a
-- boundary's running maxima of the segments' start, busy time before and busy
-- time at the end are those of the last segment starting at or before it
-- (all three only grow), and the busy time at the boundary is the smaller of
-- before + (boundary - start) and the end's (an idle segment's end has its
-- before). Ties between steps' idle shares go to the earliest step. A
-- join here instead (boundary to segment) is a nested loop over perfetto
-- tables: quadratic, 443 s at 60k kernels per GPU.
create or replace perfetto table _tl_gb_cum as
select device, ts, before, before + iif(k + c + m > 0, dur, 0) as after from (
  select device, ts, dur, k, c, m,
    coalesce(sum(iif(k + c + m > 0, dur, 0)) over (partition by device order by ts
                                                    rows between unbounded preceding and 1 preceding), 0) as before
  from _tl_gpu_seg);

create or replace perfetto table _tl_gb_step as
select step, ts, dur, device,
  1.0 - 1.0 * (max(iif(edge = 1, cum, null)) - max(iif(edge = 0, cum, null))) / dur as idle
from (
  select device, step, edge, ts, dur, kind,
    coalesce(min(max(before) over w + at - max(seg_ts) over w, max(after) over w), 0) as cum
  from (
    select d.device, st.step, 0 as edge, st.ts, st.dur, st.ts as at, 0 as kind,
      null as seg_ts, null as before, null as after
    from _tl_gb_steps st, tl_gpu_window d
    union all
    select d.device, st.step, 1, st.ts, st.dur, st.ts + st.dur, 0, null, null, null
    from _tl_gb_steps st, tl_gpu_window d
    union all
    select device, null, null, null, null, ts, 1, ts, before, after from _tl_gb_cum)
  window w as (partition by device order by at, kind desc rows unbounded preceding))
where kind = 0 and dur > 0
group by device, step;

select
  iif(span - busy >= ${idle_warn_fraction} * span, 'warning', 'ok') as severity,
  printf('GPU %d: compute %.0f%%, communication not overlapped %.0f%%, copies/memsets alone %.0f%%, idle %.0f%% '
         || 'of %.2f s (steady state, from +%.2f s)', device, 100.0 * compute / span, 100.0 * comm_only / span,
         100.0 * copy_only / span, 100.0 * (span - busy) / span, span / 1e9, (ts - trace_start()) / 1e9)
    as finding,
  ts, span as dur,
  iif(span - busy >= ${idle_warn_fraction} * span,
      'the GPU waits for work: host_gpu_gaps and gpu_queue_delay say whether the host is too slow to feed it', null)
    as hint,
  device, round(1.0 * compute / span, 4) as compute_fraction, round(1.0 * comm_only / span, 4) as comm_fraction,
  round(1.0 * copy_only / span, 4) as copy_fraction, round(1.0 * (span - busy) / span, 4) as idle_fraction
from tl_gpu_time where span > 0
union all
select 'info',
  printf('GPU %d per step (NVTX range ''%s'', %d steps): idle %.0f%% on average, %.0f%% in the worst step (step %d)',
         device, (select name from _tl_gb_stepname), count(*), 100.0 * avg(idle), 100.0 * max(idle),
         (select step from _tl_gb_step x where x.device = s.device order by idle desc, step limit 1)),
  (select ts from _tl_gb_step x where x.device = s.device order by idle desc, step limit 1),
  (select dur from _tl_gb_step x where x.device = s.device order by idle desc, step limit 1),
  null, device, null, null, null, round(avg(idle), 4)
from _tl_gb_step s group by device;
