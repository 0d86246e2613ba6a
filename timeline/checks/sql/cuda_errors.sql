-- Non-zero return codes, one finding per (API, code) listing the functions
-- that returned it. "Not ready" (600) from the query calls is how polling
-- works, not an error.
--
-- Map-reduce form (checks/mapreduce.py): everything above the @reduce line
-- runs on each chunk of a trace set and leaves _tl_ce_part, a few rows that
-- add up across chunks; what follows runs on the chunks' rows (in SQLite), or
-- here on this trace's own. A call cut at a chunk boundary (debug.timeline_cut
-- 'start' or 'both': it began in an earlier chunk) is counted where it began.
create or replace perfetto table _tl_ce as
select fn, category, utid, ts, dur,
  coalesce(extract_arg(arg_set_id, 'debug.ret'), extract_arg(arg_set_id, 'args.ret')) as ret,
  coalesce(extract_arg(arg_set_id, 'debug.timeline_cut'), extract_arg(arg_set_id, 'args.timeline_cut'), '')
    not in ('start', 'both') as began
from _tl_cuda where arg_set_id is not null;

create or replace perfetto table _tl_ce_err as
select * from _tl_ce
where ret is not null and ret != 0
  and not (ret = 600 and fn in ('cudaStreamQuery', 'cudaEventQuery', 'cuStreamQuery', 'cuEventQuery'));

create or replace perfetto table _tl_ce_part as
select 'err' as kind, category, ret, fn, t.tid, t.name as thread, sum(began) as calls,
  min(iif(began, ts, null)) as first_ts, max(ts + dur) as last_end, null as with_ret, null as not_ready
from _tl_ce_err e join thread t using (utid) group by category, ret, fn, utid
union all
select 'all', null, null, null, null, null, null, null, null, sum(ret is not null and began),
  sum(ret != 0 and began)
from _tl_ce;

-- @reduce _tl_ce_part
create or replace perfetto table _tl_ce_code as
select category, ret, sum(calls) as calls, count(distinct fn) as functions, count(distinct tid) as threads,
  min(first_ts) as first_ts, max(last_end) as last_end,
  (select group_concat(printf('%s %,d', fn, n), ', ') from (
     select fn, sum(calls) as n from _tl_ce_part x where x.kind = 'err' and x.category = e.category
       and x.ret = e.ret group by fn order by n desc, fn)) as by_fn,
  (select printf('%s (tid %d)', coalesce(x.thread, '?'), x.tid) from _tl_ce_part x
   where x.kind = 'err' and x.category = e.category and x.ret = e.ret and x.first_ts is not null
   order by x.first_ts, x.tid limit 1) as first_thread
from _tl_ce_part e where kind = 'err' group by category, ret;

select 'error' as severity,
  printf('%s code %d (%s): %,d failed call%s to %d function%s (%s); first on %s%s',
         case category when 'cuda' then 'CUDA runtime' when 'cuda_driver' then 'CUDA driver' else 'NCCL' end,
         ret,
         case category
           when 'cuda' then case ret
             when 1 then 'cudaErrorInvalidValue' when 2 then 'cudaErrorMemoryAllocation'
             when 3 then 'cudaErrorInitializationError' when 4 then 'cudaErrorCudartUnloading'
             when 35 then 'cudaErrorInsufficientDriver' when 98 then 'cudaErrorInvalidDeviceFunction'
             when 100 then 'cudaErrorNoDevice' when 101 then 'cudaErrorInvalidDevice'
             when 200 then 'cudaErrorInvalidKernelImage' when 209 then 'cudaErrorNoKernelImageForDevice'
             when 400 then 'cudaErrorInvalidResourceHandle' when 600 then 'cudaErrorNotReady'
             when 700 then 'cudaErrorIllegalAddress' when 701 then 'cudaErrorLaunchOutOfResources'
             when 702 then 'cudaErrorLaunchTimeout' when 719 then 'cudaErrorLaunchFailure'
             when 900 then 'cudaErrorStreamCaptureUnsupported' when 999 then 'cudaErrorUnknown'
             else 'see the cudaError_t table' end
           when 'cuda_driver' then case ret
             when 1 then 'CUDA_ERROR_INVALID_VALUE' when 2 then 'CUDA_ERROR_OUT_OF_MEMORY'
             when 3 then 'CUDA_ERROR_NOT_INITIALIZED' when 4 then 'CUDA_ERROR_DEINITIALIZED'
             when 100 then 'CUDA_ERROR_NO_DEVICE' when 101 then 'CUDA_ERROR_INVALID_DEVICE'
             when 200 then 'CUDA_ERROR_INVALID_IMAGE' when 201 then 'CUDA_ERROR_INVALID_CONTEXT'
             when 209 then 'CUDA_ERROR_NO_BINARY_FOR_GPU' when 400 then 'CUDA_ERROR_INVALID_HANDLE'
             when 500 then 'CUDA_ERROR_NOT_FOUND' when 600 then 'CUDA_ERROR_NOT_READY'
             when 700 then 'CUDA_ERROR_ILLEGAL_ADDRESS' when 701 then 'CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES'
             when 702 then 'CUDA_ERROR_LAUNCH_TIMEOUT' when 719 then 'CUDA_ERROR_LAUNCH_FAILED'
             when 999 then 'CUDA_ERROR_UNKNOWN' else 'see the CUresult table' end
           else case ret
             when 1 then 'ncclUnhandledCudaError' when 2 then 'ncclSystemError' when 3 then 'ncclInternalError'
             when 4 then 'ncclInvalidArgument' when 5 then 'ncclInvalidUsage' when 6 then 'ncclRemoteError'
             when 7 then 'ncclInProgress' else 'see the ncclResult_t table' end
         end,
         calls, iif(calls = 1, '', 's'), functions, iif(functions = 1, '', 's'), by_fn, first_thread,
         iif(threads > 1, printf(' (%d threads in all)', threads), '')) as finding,
  first_ts as ts, last_end - first_ts as dur,
  case when ret = 2 then 'out of memory: see alloc_churn; reduce batch or activation memory'
       when ret = 35 and category = 'cuda' then 'the installed NVIDIA driver is older than this CUDA runtime '
            || '(or there is none): upgrade the driver or use a build for an older CUDA'
       when ret = 100 then 'no GPU visible: check CUDA_VISIBLE_DEVICES, the container runtime and the driver'
       when ret = 700 then 'a kernel accessed invalid memory: rerun with CUDA_LAUNCH_BLOCKING=1 to find it'
  end as hint,
  ret as code, calls, functions
from _tl_ce_code
union all
select 'ok', printf('no CUDA call failed (%,d return codes recorded%s)', coalesce(sum(with_ret), 0),
                    iif(sum(not_ready) > 0, printf('; %,d "not ready" from query calls: polling, not errors',
                                                   sum(not_ready)), '')),
  null, null, null, null, null, null
from _tl_ce_part where kind = 'all'
having not exists(select 1 from _tl_ce_code);
