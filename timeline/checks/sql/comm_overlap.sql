-- Communication (NCCL kernels) hidden behind compute kernels on the same GPU:
-- exposed communication is time the GPU computes nothing while gradients
-- move, which data-parallel training hides with bucketed all-reduce.
select
  iif(comm >= ${min_comm_fraction} * span and overlap < ${overlap_warn_fraction} * comm, 'warning', 'ok')
    as severity,
  printf('GPU %d: communication kernels ran %.2f s (%.0f%% of the steady state), %.0f%% of it overlapped with '
         || 'compute; %.2f s exposed', device, comm / 1e9, 100.0 * comm / span, 100.0 * overlap / comm,
         comm_only / 1e9) as finding,
  ts, span as dur,
  iif(comm >= ${min_comm_fraction} * span and overlap < ${overlap_warn_fraction} * comm,
      'overlap gradients'' all-reduce with the backward pass (DDP bucket_cap_mb, gradient_as_bucket_view; FSDP '
      || 'prefetch), or communicate less (larger batches per step, gradient accumulation)', null) as hint,
  device, round(1.0 * overlap / comm, 4) as overlap_fraction, round(comm_only / 1e9, 4) as exposed_s
from tl_gpu_time where comm > 0 and span > 0
union all
select 'n/a', 'no communication (NCCL) kernels on any GPU', null, null, null, null, null, null
where not exists(select 1 from tl_gpu_time where comm > 0);
