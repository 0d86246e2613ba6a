-- Shared by the checks, run once per trace before them.

-- Running time per real thread (the "outside the recording" pseudo thread and
-- idle have no process).
create or replace perfetto table _tl_run as
select s.utid, t.upid, sum(s.dur) as run_ns
from sched s join thread t using (utid)
where t.upid is not null and s.utid != 0
group by s.utid;

create or replace perfetto table _tl_proc_run as
select upid, sum(run_ns) as run_ns from _tl_run group by upid;

-- DataLoader worker processes (torch names them, and their threads, pt_data_worker).
create or replace perfetto table _tl_workers as
select distinct t.upid from thread t join process p using (upid)
where p.name = 'pt_data_worker' or (t.name = 'pt_data_worker' and t.tid = p.pid);

-- Every CUDA runtime/driver/NCCL call with its thread and process; `fn` is
-- the API name without the per-thread-stream suffixes (_ptsz, _ptds).
create or replace perfetto table _tl_cuda as
select s.id, s.ts, s.dur, s.name, replace(replace(s.name, '_ptsz', ''), '_ptds', '') as fn,
  s.category, s.arg_set_id, tt.utid, t.upid
from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
where s.category in ('cuda', 'cuda_driver', 'nccl');

create or replace perfetto table _tl_launches as
select id, ts, dur, fn as name, utid, upid, arg_set_id from _tl_cuda
where fn in ('cudaLaunchKernel', 'cuLaunchKernel', 'cuLaunchKernelEx', 'cudaLaunchKernelExC',
             'cudaLaunchCooperativeKernel', 'cuLaunchCooperativeKernel');

-- The innermost Python frame, "file:line function", of a slice's `py` arg
-- (the pystack family: "train.py:57 step ← train.py:90 main ...", frames
-- joined by " ← ", char(8592)); NULL without the arg or when its stack is
-- unknown ('?').  Perfetto traces keep args as debug.*, Chrome
-- JSON ones as args.*.
create or replace perfetto macro _tl_py_line(arg_set Expr)
returns Expr as (
  (select iif(instr(p, ' ' || char(8592) || ' ') > 0, substr(p, 1, instr(p, ' ' || char(8592) || ' ') - 1),
              nullif(p, '?'))
   from (select coalesce(extract_arg($arg_set, 'debug.py'), extract_arg($arg_set, 'args.py')) as p))
);

-- The training process: the parent of the DataLoader workers if known, else a
-- root of the recorded tree (its parent was not recorded), busiest first.
create or replace perfetto table _tl_main_process as
select p.upid, p.pid from process p join _tl_proc_run r using (upid)
where p.upid not in (select upid from _tl_workers)
order by exists(select 1 from process w where w.parent_upid = p.upid
                and w.upid in (select upid from _tl_workers)) desc,
         (p.parent_upid is null or p.parent_upid not in (select upid from _tl_proc_run)) desc,
         r.run_ns desc
limit 1;

-- The main training (dispatcher) thread, by the best evidence present: the
-- recorder's 'main training thread' marker (the thread that iterates the
-- DataLoader); the thread issuing the most kernel launches; the training
-- process' leader thread (it iterates the DataLoader in every common
-- launcher); its busiest thread. The marker comes first: in PyTorch the
-- backward pass runs on autograd's own thread (pt_autograd_<device>), which
-- often launches more kernels than the main thread (tl_backward_thread).
-- Ties are broken by what the trace says, never by trace_processor's row
-- order: the earliest marker, then the lowest tid (every rank of a torchrun
-- job attached with --pid is marked over the same span); the thread that
-- launched first. So the converter's partials (checks/partials) can make the
-- same choice.
create or replace perfetto table _tl_main_pick as
select * from (
  select * from (select tt.utid, 1 as prio, 'marked as the main training thread by the recorder' as why
                 from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
                 where s.category = 'dataloader' and s.name = 'main training thread'
                 order by s.dur desc, s.ts, t.tid limit 1)
  union all
  select * from (select utid, 2, 'issues the most kernel launches'
                 from _tl_launches group by utid order by count(*) desc, min(ts) limit 1)
  union all
  select * from (select r.utid, 3, 'leader thread of the training process'
                 from _tl_run r join thread t using (utid)
                 where t.tid = (select pid from _tl_main_process) and t.upid = (select upid from _tl_main_process))
  union all
  select * from (select utid, 4, 'busiest thread of the training process'
                 from _tl_run where upid = (select upid from _tl_main_process)
                 order by run_ns desc limit 1)
  order by prio limit 1);

-- trace_processor can split one thread into several utids (e.g. a track
-- descriptor sorted before the thread is known): take the one with the
-- scheduling data.
create or replace perfetto table tl_main_thread as
select coalesce((select r.utid from _tl_run r join thread x using (utid)
                 where x.tid = t.tid and x.upid is t.upid order by r.run_ns desc limit 1), m.utid) as utid,
  t.upid, t.tid, coalesce(t.name, 'tid ' || t.tid) as name, p.pid,
  coalesce(p.name, 'pid ' || p.pid) as process_name, m.why
from _tl_main_pick m join thread t using (utid) left join process p using (upid);

-- PyTorch's backward (autograd device) thread of the main thread's process:
-- it launches the backward kernels, so it dispatches GPU work too.
create or replace perfetto table tl_backward_thread as
select t.utid, t.tid, t.name, t.upid from thread t
where t.upid = (select upid from tl_main_thread) and t.name glob 'pt_autograd_*'
  and t.utid != (select utid from tl_main_thread)
order by (select count(*) from _tl_launches l where l.utid = t.utid) desc,
         coalesce((select run_ns from _tl_run r where r.utid = t.utid), 0) desc
limit 1;

-- Each kernel launch with what it launched (the kernel name when resolved,
-- else its function pointer), numbered per process.
create or replace perfetto table _tl_launch_k as
select upid, ts, kernel, row_number() over (partition by upid order by ts) as i,
  count(*) over (partition by upid) as n
from (select upid, ts, coalesce(extract_arg(arg_set_id, 'debug.kernel'), extract_arg(arg_set_id, 'args.kernel'),
                                extract_arg(arg_set_id, 'debug.func'), extract_arg(arg_set_id, 'debug.function'),
                                name) as kernel
      from _tl_launches);

-- Start-up of each process that makes CUDA calls: from its first call to the
-- first launch of the last kernel new to it. Lazy module loading, library
-- set-up and the input pipeline's first batches fall in it; steady-state
-- findings are judged after it (end_ts NULL: no repeated launches, no
-- start-up to set apart). Only kernels launched more than once and first seen
-- in the first half of the process' launches count, so a kernel new near the
-- end (evaluation, a final save) does not move the end of start-up there.
create or replace perfetto table tl_startup as
select c.upid, min(c.ts) as ts,
  (select max(first_ts) from (select min(ts) as first_ts, min(i) as first_i, count(*) as cnt, max(n) as n
                              from _tl_launch_k l where l.upid = c.upid group by kernel)
   where cnt >= 2 and first_i <= n / 2) as end_ts
from _tl_cuda c group by c.upid;

-- The main process' steady state, when it makes CUDA calls: from the end of
-- its start-up to its last CUDA call (no row: judge the whole trace).
create or replace perfetto table tl_steady as
select coalesce(st.end_ts, st.ts) as ts,
  (select max(c.ts + c.dur) from _tl_cuda c where c.upid = st.upid) as end_ts
from tl_startup st where st.upid = (select upid from tl_main_thread);

-- Short process names for messages: the leader thread's name (comm) rather
-- than the executable's full path.
create or replace perfetto table _tl_pname as
select p.upid, p.pid,
  coalesce((select t.name from thread t where t.upid = p.upid and t.tid = p.pid and t.name is not null
            order by t.utid limit 1), p.name, 'pid ' || p.pid) as name
from process p;

-- The window length for `step` ns windows over the one-row span table (ts,
-- end_ts), widened so that the span holds at most ${window_cap} windows: the
-- work of a windowed check grows with the number of windows, and a span of
-- decades (a crafted or broken trace) must not make it unbounded.
create or replace perfetto macro _tl_window_step(span TableOrSubquery, step Expr)
returns Expr as (
  max($step, coalesce((select (end_ts - ts + ${window_cap} - 1) / ${window_cap} from $span), 0))
);

-- Consecutive windows of `step` ns (widened as _tl_window_step says) over the
-- one-row span table (ts, end_ts); the last one is cut at end_ts. Columns:
-- ts, dur, win (0-based).
create or replace perfetto macro _tl_windows(span TableOrSubquery, step Expr)
returns TableOrSubquery as (
  with recursive p as (select ts, end_ts, _tl_window_step!($span, $step) as step from $span where ts is not null),
  w(i) as (
    select 0 from p
    union all
    select i + 1 from w, p where p.ts + (i + 1) * p.step < p.end_ts
  )
  select p.ts + i * p.step as ts, min(p.step, p.end_ts - (p.ts + i * p.step)) as dur, i as win
  from w, p
);

-- Per key: row count n, nearest-rank p50 and p99, and max of `val` over the
-- rows of `src` (columns key, val).
create or replace perfetto macro _tl_percentiles(src TableOrSubquery)
returns TableOrSubquery as (
  select key, max(n) as n,
    max(iif(rn = max(1, cast(ceil(0.50 * n) as int)), val, null)) as p50,
    max(iif(rn = max(1, cast(ceil(0.99 * n) as int)), val, null)) as p99,
    max(val) as mx
  from (select key, val, row_number() over (partition by key order by val) as rn,
               count(*) over (partition by key) as n from $src)
  group by key
);

-- Per name: of the rows of `src` (columns name, py_line) with a Python line,
-- how many (with_stack), the line most of them came from (top_line, ties to
-- the first line in order) and how many came from it (top_n).
create or replace perfetto macro _tl_top_py_line(src TableOrSubquery)
returns TableOrSubquery as (
  select name, with_stack, py_line as top_line, n as top_n
  from (select name, py_line, n, sum(n) over (partition by name) as with_stack,
               row_number() over (partition by name order by n desc, py_line) as rn
        from (select name, py_line, count(*) as n from $src where py_line is not null group by name, py_line))
  where rn = 1
);

-- GPU activity (the gpu family, from CUPTI): kernels, copies and memsets as
-- slices on per-stream tracks, categories gpu_kernel / gpu_memcpy /
-- gpu_memset, args device, stream, correlation_id..., and a flow from the CPU
-- call that caused each one. NCCL's kernels are the communication.
create or replace perfetto table _tl_gpu as
select s.id, s.ts, s.dur, s.name, s.category,
  coalesce(extract_arg(s.arg_set_id, 'debug.device'), extract_arg(s.arg_set_id, 'args.device'), 0) as device,
  s.category = 'gpu_kernel' and (s.name glob 'nccl*' or s.name glob '*ncclKernel*' or s.name glob '*ncclDevKernel*')
    as comm
from slice s where s.category in ('gpu_kernel', 'gpu_memcpy', 'gpu_memset') and s.dur > 0;

-- Per device, the thread whose calls caused most of its work (by flow; a tie:
-- the lowest utid), else the main thread: gaps on the device are judged
-- against that thread. One pass over the flows for all devices (a subquery
-- per device read them all once per device: 3x slower with 8 GPUs).
create or replace perfetto table _tl_gpu_owner as
select d.device, coalesce(b.utid, (select utid from tl_main_thread)) as utid
from (select distinct device from _tl_gpu) d
left join (select device, utid, row_number() over (partition by device order by n desc, utid) as rn
           from (select g.device, tt.utid, count(*) as n
                 from flow f join _tl_gpu g on g.id = f.slice_in join slice c on c.id = f.slice_out
                 join thread_track tt on c.track_id = tt.id
                 group by g.device, tt.utid)) b on b.device = d.device and b.rn = 1;

-- Per device: the steady state (from the end of the owning process' start-up,
-- or the first GPU work, to the end of the last).
create or replace perfetto table tl_gpu_window as
select g.device, o.utid, t.upid,
  max(min(g.ts), coalesce((select end_ts from tl_startup s where s.upid = t.upid), 0)) as ts,
  max(g.ts + g.dur) as end_ts
from _tl_gpu g join _tl_gpu_owner o using (device) left join thread t on t.utid = o.utid
group by g.device;

-- Elementary segments of each device's timeline: between two consecutive
-- starts/ends of any GPU work, how many kernels (k), communication kernels
-- (c) and copies/memsets (m) were running. Busy/idle/overlap are sums over
-- these: a union of intervals without a quadratic self-join.
create or replace perfetto table _tl_gpu_seg as
select device, ts, dur, k, c, m from (
  select device, ts, lead(ts) over (partition by device order by ts) - ts as dur,
    sum(dk) over (partition by device order by ts rows unbounded preceding) as k,
    sum(dc) over (partition by device order by ts rows unbounded preceding) as c,
    sum(dm) over (partition by device order by ts rows unbounded preceding) as m
  from (select device, ts, sum(dk) as dk, sum(dc) as dc, sum(dm) as dm from (
          select device, ts, iif(category = 'gpu_kernel' and not comm, 1, 0) as dk, iif(comm, 1, 0) as dc,
            iif(category != 'gpu_kernel', 1, 0) as dm from _tl_gpu
          union all
          select device, ts + dur, -iif(category = 'gpu_kernel' and not comm, 1, 0), -iif(comm, 1, 0),
            -iif(category != 'gpu_kernel', 1, 0) from _tl_gpu)
        group by device, ts))
where dur > 0;

-- Per device, over its steady state: time with a compute kernel running
-- (compute), with communication kernels (comm; comm_only: and no compute;
-- overlap: and compute too), with only copies/memsets (copy_only), any (busy).
create or replace perfetto table tl_gpu_time as
select w.device, w.ts, w.end_ts - w.ts as span,
  coalesce(sum(iif(s.k > 0, s.d, 0)), 0) as compute,
  coalesce(sum(iif(s.c > 0, s.d, 0)), 0) as comm,
  coalesce(sum(iif(s.k = 0 and s.c > 0, s.d, 0)), 0) as comm_only,
  coalesce(sum(iif(s.k > 0 and s.c > 0, s.d, 0)), 0) as overlap,
  coalesce(sum(iif(s.k = 0 and s.c = 0 and s.m > 0, s.d, 0)), 0) as copy_only,
  coalesce(sum(iif(s.k + s.c + s.m > 0, s.d, 0)), 0) as busy
from tl_gpu_window w left join (
  select g.device, g.k, g.c, g.m, min(g.ts + g.dur, x.end_ts) - max(g.ts, x.ts) as d
  from _tl_gpu_seg g join tl_gpu_window x using (device)
  where g.ts < x.end_ts and g.ts + g.dur > x.ts) s using (device)
group by w.device;

-- Ranked processes (the rank=N labels timeline writes from RANK and the
-- launchers' equivalents) and their main thread: the process's first thread
-- (tid = pid), where torch calls the collectives.  rank_straggler, rank_imbalance.
create or replace perfetto table _tl_ranks as
select p.upid, p.pid, t.utid, cast(substr(a.display_value, 6) as int) as rank
from process p join args a on a.arg_set_id = p.arg_set_id
join thread t on t.upid = p.upid and t.tid = p.pid
where a.key glob 'chrome.process_label*' and a.display_value glob 'rank=*';
