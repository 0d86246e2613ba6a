-- Where the main thread's CPU time goes, in Python: its CPU samples (the
-- pystack family's timer samples, --py-sample-hz: cpu_profile_stack_sample;
-- perf_sample in traces of older versions) in the steady state, by
-- function.  A frame is named "function (file:line)"; a function is its
-- name and file, its hottest line the line most of its self samples hit.
-- self: samples in the function itself; total: samples with it anywhere on
-- the stack (counted once per sample, however deep the recursion).
-- Shares are of all the thread's samples: those the converter keeps without a
-- Python stack, as one frame with no file ('<no Python frame>': start-up,
-- shutdown, C entered without a frame; '<Python stack unreadable>'; '<Python
-- stack lost>': taken, but its record never reached the log), count in
-- the total, but are no function of the user's: they get a line each, after.
create or replace perfetto table _tl_ph_all as
select id * 2 as id, ts, utid, callsite_id from perf_sample
union all
select id * 2 + 1, ts, utid, callsite_id from cpu_profile_stack_sample;

create or replace perfetto table _tl_ph_s as
select ps.id, ps.callsite_id from _tl_ph_all ps join thread t using (utid)
where t.tid = (select tid from tl_main_thread)
  and ps.callsite_id is not null
  and ps.ts >= coalesce((select ts from tl_steady), 0)
  and ps.ts <= coalesce((select end_ts from tl_steady), (select max(ts) from _tl_ph_all));

create or replace perfetto table _tl_ph_frames as
select s.id as sid, 1 as leaf, f.name from _tl_ph_s s
  join stack_profile_callsite c on c.id = s.callsite_id join stack_profile_frame f on f.id = c.frame_id
union all
select s.id, 0, f.name from _tl_ph_s s, experimental_ancestor_stack_profile_callsite(s.callsite_id) a
  join stack_profile_frame f on f.id = a.frame_id;

create or replace perfetto table _tl_ph_fn as
select sid, leaf, name,
  iif(instr(name, ' (') > 0, substr(name, 1, instr(name, ' (') - 1), name) as fn,
  iif(instr(name, ' (') > 0 and instr(name, ':') > instr(name, ' ('),
      substr(name, instr(name, ' (') + 2, instr(name, ':') - instr(name, ' (') - 2), '') as file,
  iif(instr(name, ':') > 0, cast(substr(name, instr(name, ':') + 1, length(name) - instr(name, ':') - 1) as int),
      null) as line
from _tl_ph_frames;

create or replace perfetto table _tl_ph as
select fn, file, sum(leaf) as self, count(distinct sid) as total,
  (select x.line from _tl_ph_fn x where x.fn = f.fn and x.file = f.file and x.leaf = 1
   group by x.line order by count(*) desc limit 1) as hot_line,
  file = '' and fn in ('<no Python frame>', '<Python stack unreadable>', '<Python stack lost>') as bucket
from _tl_ph_fn f group by fn, file;

create or replace perfetto table _tl_ph_n as select count(*) as n from _tl_ph_s;

select * from (
select 'info' as severity,
  printf('%s:%s %s: %.0f%% of the main thread''s CPU samples in it (self), %.0f%% under it (total), of %,d',
         file, coalesce(hot_line, '?'), fn, 100.0 * self / n, 100.0 * total / n, n) as finding,
  null as ts, null as dur, null as hint,
  self as self_samples, total as total_samples, round(1.0 * self / n, 4) as self_fraction
from _tl_ph, _tl_ph_n
where n > 0 and self > 0 and not bucket
order by self desc limit ${top})
union all
select 'info',
  printf('%.0f%% of the main thread''s CPU samples had %s (%,d of %,d)', 100.0 * self / n,
         case fn when '<no Python frame>' then 'no Python frame (interpreter start-up or shutdown, or C code '
                  || 'entered without one)'
                 when '<Python stack lost>' then 'a Python stack whose record was lost (the recorder''s stack '
                  || 'ring stayed full)'
                 else 'a Python stack that could not be read' end, self, n),
  null, null, null, self, total, round(1.0 * self / n, 4)
from _tl_ph, _tl_ph_n
where n > 0 and self > 0 and bucket
union all
select 'n/a', 'no CPU samples of the main thread (record with the pystack family and --py-sample-hz > 0)',
  null, null, null, 0, 0, 0
where (select n from _tl_ph_n) = 0;
