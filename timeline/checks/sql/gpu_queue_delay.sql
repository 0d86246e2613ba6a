-- Launch-to-start queueing: how long after its launch call (start of the CPU
-- slice, linked by a flow) each kernel began on the GPU. Near zero, the
-- launch queue is empty: the GPU runs whatever the host just sent and waits
-- for the next; large, the host runs ahead and the GPU is the bottleneck.
create or replace perfetto table _tl_qd as
select g.device, g.ts - c.ts as delay
from flow f join slice c on c.id = f.slice_out join _tl_gpu g on g.id = f.slice_in
join tl_gpu_window w using (device)
where g.category = 'gpu_kernel' and g.ts >= w.ts and c.category in ('cuda', 'cuda_driver', 'nccl');

create or replace perfetto table _tl_qd_stat as
select key as device, n, p50, p99, mx from _tl_percentiles!((select device as key, delay as val from _tl_qd));

select
  iif(q.p50 < ${starve_us} * 1000 and t.span - t.busy >= ${idle_warn_fraction} * t.span, 'warning', 'ok')
    as severity,
  printf('GPU %d: kernels started %.1f us (median; p99 %.1f us) after their launch call, over %,d kernels; '
         || 'the GPU was idle %.0f%% of the steady state', q.device, q.p50 / 1e3, q.p99 / 1e3, q.n,
         100.0 * (t.span - t.busy) / t.span)
    || iif(q.p50 < ${starve_us} * 1000, ': the launch queue is empty, the GPU starves on the host',
           ': work is queued ahead of the GPU') as finding,
  t.ts, t.span as dur,
  iif(q.p50 < ${starve_us} * 1000 and t.span - t.busy >= ${idle_warn_fraction} * t.span,
      'the host cannot keep the GPU fed: fewer, larger kernels (fusion, torch.compile), CUDA graphs, less Python '
      || 'per step; check cpu_contention and input_stall', null) as hint,
  q.device, round(q.p50 / 1e3, 3) as delay_p50_us, round(q.p99 / 1e3, 3) as delay_p99_us, q.n as kernels
from _tl_qd_stat q join tl_gpu_time t using (device) where t.span > 0
union all
select 'n/a', 'no GPU kernel is linked to the CPU call that launched it (no flows)', null, null, null, null, null,
  null, null
where not exists(select 1 from _tl_qd);
