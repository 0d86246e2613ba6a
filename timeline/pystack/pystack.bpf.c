// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Python call stacks of the recorded threads (the `pystack` family).
 *
 * Where a stack is taken:
 *   tl_py_call    uprobe on CUDA synchronizing calls and launches (attached
 *                 by the plugin, cookie = the cuda family's probe id and
 *                 TL_PY_CK_* flags): one TL_PY_CALL record; a launch only
 *                 every launch_every-th of its thread (struct py_launches).
 *   tl_py_switch  sched_switch: a recorded thread that blocks (S or D) has
 *                 its stack taken; when it runs again one TL_PY_WAIT record
 *                 covers the wait (if it lasted min_wait_ns).
 *
 * How: the process's interpreter layout is in py_procs (the plugin fills it
 * from the CPython version, timeline/pystack/layouts.py).  The thread's
 * PyThreadState is found by walking _PyRuntime.interpreters.head ->
 * threads.head -> next, matching tstate->thread_id (pthread_self(), which
 * on x86-64 is the thread's fs base) against the current task's fs base,
 * and cached per tid (checked with one read).  Its frames are walked
 * innermost first, recording per frame (code object, instruction offset,
 * identity checksum); names, files and lines are resolved in user space.
 * A stack is identified by a hash of its frames and sent to the plugin once
 * per process (py_seen): a repeated stack costs one 40-byte record.
 *
 * Cost (bench/pystack_cost.py): reads of the target's memory dominate, so
 * 3.11+ read the top of the thread's frame stack (its data stack chunk) at
 * once and take most frames from that copy, and a code object's checksum
 * is remembered (struct code_slot) where code_dealloc is probed, each free
 * retiring what was remembered of addresses in its stripe (tl_py_proc.frees).
 * CPU samples land in code that was not running a moment ago: every read
 * of the target's memory there is a cache and TLB miss (~1.3 us more than
 * the same read at a switch, measured), hence no reads at all for threads
 * long without a thread state.  The checksum:
 * first line, co_version (3.12+; 3.10 and 3.11: the name's hash and the
 * last bytes of the file name), name and file name pointers.
 *
 * Scratch space lives in task storage, not per-CPU: uprobe programs can be
 * preempted, and another task's program on the same CPU would overwrite a
 * per-CPU buffer.  sched_switch only walks a thread that blocks, which a
 * running BPF program never does.
 */
#include "tracking.bpf.h"
#include "records.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct tl_py_event tl_py_event_layout = {};
const volatile struct tl_py_proc tl_py_proc_layout = {};
const volatile struct tl_py_stack tl_py_stack_layout = {};

#define MAX_THREADS 256    /* thread states looked at to find the current one */
#define MAX_SKIPPED 16     /* C-stack shim frames passed over, beyond MAX_FRAMES */
#define NEG_CACHE_NS 100000000ULL  /* "not a Python thread" is re-checked after this */
#define STR_HASH_NONE 0xFFFFFFFFFFFFFFFFULL

/* py_stats slots */
#define ST_WALKS 0
#define ST_NO_STATE 1
#define ST_NO_FRAME 2
#define ST_TRUNC 3
#define ST_FAULT 4
#define ST_STACKS 5        /* distinct stacks sent */
#define ST_STACKS_LOST 6   /* py_stacks ring full: sent again next time */
#define ST_WAITS 7
#define ST_SHORT_WAITS 8   /* waits under min_wait_ns, not recorded */
#define ST_WALK_NS 9       /* time spent taking stacks (find the thread, walk, send), ns, in
			    * ST_TIMED_WALKS walks; at calls, the program from its first
			    * clock read to its last */
#define ST_FRAMES 10       /* frames walked */
#define ST_LAUNCHES 11     /* launches seen (recorded Python processes) */
#define ST_NESTED 12       /* driver launches inside a runtime launch: not counted */
#define ST_TIMED_WALKS 13  /* the walks ST_WALK_NS counts: not those at calls run through the
			    * cuda family's hook (no clock read of their own; the kernel's
			    * count of that family's program, kernel.bpf_stats_enabled, has them) */
#define NSTATS 14

/* An entry-only runtime launch has no return to clear: a driver launch deeper
 * on the stack in the same or the next tick (1-10 ms, as HZ is) counts as
 * made inside it (as the cuda family decides with 2 ms, cuda.bpf.c
 * pending_window_ns). */
#define NESTED_WINDOW_TICKS 1

struct py_settings {
	__u64 min_wait_ns;
	__u32 no_chunk;    /* read each frame on its own (for comparisons) */
	__u32 launch_every; /* a stack at every Nth launch of a thread; 0: none */
};

/* A thread's launch counter, small task storage of its own: most launches
 * only count, and must not make the walk's scratch space exist. */
struct py_launches {
	__u64 left;        /* launches to pass over before the next stack */
	__u64 rt_sp;       /* the last runtime launch's stack pointer at entry, */
	__u64 rt_jiffies;  /* and when it was, in ticks (a fraction of a clock
			    * read's cost) */
};

struct py_thread {
	__u64 tstate;      /* 0: no thread state found ... */
	__u64 head;        /* ... while threads.head was this */
	__u64 head_id;     /* ... with this thread_id (a new thread's state is
			    * pushed at the head before the thread binds it: 0
			    * until then on 3.12+, the creator's id on 3.10/3.11) */
	__u64 ts;          /* ... at this time */
	__u64 since;       /* 0, or no thread state found at every search since then */
	__u64 born;        /* the task's start_time: a reused tid is another thread */
};

/* A code object's checksum, remembered (a direct-mapped cache in each
 * scratch) for processes whose code_dealloc is probed: each free there
 * bumps the counter of the freed address's stripe (tl_py_proc.frees), which
 * retires every entry of that stripe made before it (an entry keeps the
 * count it was made under, read before the object), so an address a new
 * code object took is read afresh.  A frame being walked holds its code
 * object: no free can retire it mid-walk. */
#define CODE_SLOTS 256
struct code_slot {
	__u64 code;
	__u32 tgid;
	__u32 gen;
	__u32 epoch;
	__u32 check;
};

/* Where a walk keeps the stack it builds and the memory it reads: one
 * window per frame and code object, and (3.11+) the top of the thread's
 * frame stack read at once (most frames then cost no read of their own).
 * The chunk buffer has a window's room past TL_PY_CHUNK so that a frame
 * at any offset below TL_PY_CHUNK can be read from it. */
struct walk_state {
	__u64 lo, hi;      /* [lo, hi) of the frame stack is in chunk */
	__u64 f;           /* the next frame */
	__u64 h;           /* the stack's hash so far */
	__u32 tgid, gen;
	__u32 depth;
	__u8 flags;
	__u8 pad[7];
};

struct py_scratch {
	struct walk_state w;
	struct code_slot codes[CODE_SLOTS];
	__u64 sent_id;     /* the last stack this scratch's walks sent (or found */
	__u32 sent_tgid;   /* in py_seen), of this process image: taken again, it */
	__u32 sent_gen;    /* needs no py_seen lookup */
	struct tl_py_stack st;
	__u8 tswin[TL_PY_TSWIN];  /* the thread state's fields the walk uses (ts_window) */
	__u8 fwin[TL_PY_WINDOW];
	__u8 cwin[TL_PY_WINDOW];
	__u8 chunk[TL_PY_CHUNK + TL_PY_WINDOW];
};

/* The thread state a thread's own walks found last (checked with the one
 * read a walk makes of it anyway): no py_threads lookup for them. */
struct tstate_hint {
	__u64 tstate;      /* 0: none */
	__u32 gen;         /* of this process image (tl_py_proc.gen) */
	__u32 pad;
};

struct py_task {
	__u64 wait_ts;     /* blocked since (0: not blocked) */
	__u64 wait_stack;
	__u8 wait_flags;
	__u8 pad[7];
	struct tstate_hint hint;
	struct py_scratch s;
};

struct seen_key {
	__u32 tgid;
	__u32 gen;         /* tl_py_proc.gen: an exec'd or reused pid starts afresh */
	__u64 stack_id;
};


struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);  /* ~87k records */
} py_ring SEC(".maps");

/* Distinct stacks, for the plugin alone (it symbolizes them at once and
 * writes them to the raw log as META blocks). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);  /* ~1000 stacks */
} py_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct tl_py_proc);
} py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct py_thread);
} py_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct seen_key);
	__type(value, __u8);
} py_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct py_task);
} py_task SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct py_launches);
} py_launch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_settings);
} py_settings SEC(".maps");

/* CPU samples walk here: a timer interrupt may land in the middle of a
 * uprobe's walk of the same task (its task storage), never in another
 * sample's walk on the same CPU (perf programs do not nest). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_scratch);
} py_sample_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NSTATS);
	__type(key, __u32);
	__type(value, __u64);
} py_stats SEC(".maps");

static __always_inline void stat(__u32 i)
{
	__u64 *n = bpf_map_lookup_elem(&py_stats, &i);

	if (n)
		*n += 1;
}

static __always_inline void stat_add(__u32 i, __u64 v)
{
	__u64 *n = bpf_map_lookup_elem(&py_stats, &i);

	if (n)
		*n += v;
}

static __always_inline __u64 read_u64(__u64 addr, int *err)
{
	__u64 v = 0;

	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		*err = 1;
	return v;
}

/* The last (up to) 16 bytes of a compact str's data and its byte length,
 * mixed: what tells two file names apart (their paths end differently).
 * The same as timeline/pystack/symbolize.py:str_tail_mix. */
static __always_inline __u64 str_tail(struct tl_py_proc *p, __u64 s)
{
	__u8 head[40] = {};
	__u64 tail[2] = {}, nbytes, x;
	__u32 state, kind, off;
	__s64 len;

	if (!s || bpf_probe_read_user(head, sizeof(head), (void *)s))
		return 0;
	off = p->str_length & 0x38;  /* aligned: the verifier wants stack reads so */
	if (off > sizeof(head) - 8)
		return 0;
	len = *(__s64 *)(head + off);
	off = p->str_state & 0x3C;
	if (off > sizeof(head) - 4)
		return 0;
	state = *(__u32 *)(head + off);
	kind = (state >> 2) & 7;
	if (!((state >> 5) & 1) || len < 0 || len > 65536 || (kind != 1 && kind != 2 && kind != 4))
		return 0;  /* not compact: no data after the header */
	nbytes = (__u64)len * kind;
	off = (state >> 6) & 1 ? p->str_ascii : p->str_compact;
	if (nbytes >= 16)
		bpf_probe_read_user(tail, 16, (void *)(s + off + nbytes - 16));
	else if (nbytes)
		bpf_probe_read_user(tail, nbytes & 15, (void *)(s + off));
	x = (nbytes ^ tail[0]) * 0x9E3779B97F4A7C15ULL;
	x = (x ^ tail[1]) * 0x9E3779B97F4A7C15ULL;
	return x ^ (x >> 29);
}

/* The same mix as timeline/pystack/symbolize.py:code_check. */
static __always_inline __u32 code_check(__u32 firstlineno, __u64 ident, __u64 name, __u64 filename)
{
	__u32 x = firstlineno * 0x9E3779B1u;

	x ^= (__u32)ident ^ (__u32)(ident >> 32);
	x ^= (__u32)(name >> 3) * 0x85EBCA77u;
	x ^= (__u32)(filename >> 3) * 0xC2B2AE3Du;
	x ^= x >> 15;
	return x;
}

static __always_inline __u64 mix(__u64 h, __u64 v)
{
	h = (h ^ v) * 0x9E3779B97F4A7C15ULL;
	return h ^ (h >> 29);
}

struct thread_walk {
	struct tl_py_proc *p;
	__u64 fsbase;
	__u64 interp;
	__u64 ts;
	__u64 found;
	int err;
};

static long thread_step(__u64 i, void *data)
{
	struct thread_walk *w = data;
	struct tl_py_proc *p = w->p;

	if (!w->ts) {  /* this interpreter's threads are done: the next interpreter's */
		w->interp = read_u64(w->interp + p->interp_next, &w->err);
		if (w->err || !w->interp)
			return 1;
		w->ts = read_u64(w->interp + p->interp_threads, &w->err);
		return w->err ? 1 : 0;
	}
	if (read_u64(w->ts + p->ts_thread_id, &w->err) == w->fsbase && !w->err) {
		w->found = w->ts;
		return 1;
	}
	w->ts = read_u64(w->ts + p->ts_next, &w->err);
	return w->err ? 1 : 0;
}

/* The span of a thread state the walk reads, in one read (each read of the
 * target's memory costs ~90 ns here): from its first field used (thread_id,
 * frame or cframe, datastack_chunk and _top) to past its last.
 * layouts.py checks that it fits TL_PY_TSWIN. */
static __always_inline __u32 ts_window(struct tl_py_proc *p, __u64 *len)
{
	__u32 lo = p->ts_thread_id, hi = p->ts_thread_id + 8;

	if (p->ts_frame < lo)
		lo = p->ts_frame;
	if (p->ts_frame + 8 > hi)
		hi = p->ts_frame + 8;
	if (p->ts_datastack != TL_PY_NONE) {
		if (p->ts_datastack < lo)
			lo = p->ts_datastack;
		if (p->ts_datastack + 16 > hi)
			hi = p->ts_datastack + 16;
	}
	*len = hi - lo;
	return lo;
}

static __always_inline int read_ts_window(struct tl_py_proc *p, struct py_scratch *t, __u64 tstate)
{
	__u64 len;
	__u32 lo = ts_window(p, &len);

	asm volatile("" : "+r"(len));  /* the bound is checked on the register the read takes */
	if (len > TL_PY_TSWIN)
		return -1;
	return bpf_probe_read_user(t->tswin, len, (void *)(tstate + lo));
}

/* A u64 field of the thread state, from the window read last. */
static __always_inline __u64 ts_field(struct tl_py_proc *p, struct py_scratch *t, __u32 off, int *err)
{
	__u64 len, at = off - ts_window(p, &len);

	if (at + 8 > len) {
		*err = 1;
		return 0;
	}
	asm volatile("" : "+r"(at));  /* the bound is checked on the register the load takes */
	if (at > TL_PY_TSWIN - 8) {
		*err = 1;
		return 0;
	}
	return *(__u64 *)(t->tswin + at);
}

/* This thread's PyThreadState, 0 when it has none; t->tswin then holds its
 * window (ts_window), read after its thread_id was found to be ours. */
static __always_inline __u64 find_tstate(struct tl_py_proc *p, struct py_scratch *t, struct tstate_hint *hint,
					 __u32 tid, __u64 fsbase, __u64 born, __u8 *flags)
{
	struct py_thread *c;
	struct thread_walk w = {};
	__u64 head, head_id, now;
	int err = 0;

	if (hint && hint->tstate && hint->gen == p->gen && !read_ts_window(p, t, hint->tstate) &&
	    ts_field(p, t, p->ts_thread_id, &err) == fsbase && !err)
		return hint->tstate;
	err = 0;
	c = bpf_map_lookup_elem(&py_threads, &tid);

	/* The cached state, still this thread's: one read for the check and the walk's fields. */
	if (c && c->tstate && !read_ts_window(p, t, c->tstate) && ts_field(p, t, p->ts_thread_id, &err) == fsbase &&
	    !err) {
		if (hint) {
			hint->tstate = c->tstate;
			hint->gen = p->gen;
		}
		return c->tstate;
	}
	now = bpf_ktime_get_boot_ns();
	err = 0;
	/* Without a thread state through searches NEG_CACHE_NS apart: a C thread
	 * (OpenMP, torch's intra-op pool), believed so until NEG_CACHE_NS after
	 * the last search without reading the target's memory (each read of
	 * it costs a cache and TLB miss in a CPU sample of such a thread).  A
	 * state it takes meanwhile (PyGILState_Ensure) is found then. */
	if (c && !c->tstate && c->since && c->born == born && c->ts - c->since >= NEG_CACHE_NS &&
	    now - c->ts < NEG_CACHE_NS) {
		*flags |= TL_PYF_NO_STATE;
		return 0;
	}
	err = 0;
	w.interp = read_u64(p->runtime + p->rt_interp_head, &err);
	if (err || !w.interp) {
		*flags |= TL_PYF_FAULT;
		return 0;
	}
	head = read_u64(w.interp + p->interp_threads, &err);
	if (err) {
		*flags |= TL_PYF_FAULT;
		return 0;
	}
	head_id = head ? read_u64(head + p->ts_thread_id, &err) : 0;
	err = 0;
	/* "No state" stands while the list's head is unchanged, and so is its
	 * thread_id, for a thread without one for NEG_CACHE_NS already: a new
	 * thread binds the state its parent made for it within its first
	 * moments, and that state need not be the head (threads started
	 * together: the head is the last one's, still unbound, while the first
	 * binds its own deeper in the list and blocks; CI saw such a thread's
	 * 0.3 s wait go without a stack). */
	if (c && !c->tstate && c->head == head && c->head_id == head_id && now - c->ts < NEG_CACHE_NS &&
	    c->since && c->born == born && now - c->since >= NEG_CACHE_NS) {
		*flags |= TL_PYF_NO_STATE;
		return 0;
	}
	w.p = p;
	w.fsbase = fsbase;
	w.ts = head;
	bpf_loop(MAX_THREADS, thread_step, &w, 0);
	if (w.err)
		*flags |= TL_PYF_FAULT;
	if (!w.found)
		*flags |= TL_PYF_NO_STATE;
	else if (read_ts_window(p, t, w.found))
		*flags |= TL_PYF_FAULT;
	if (c) {  /* in place: an LRU map's update allocates an element (~1.8 us in a sample) */
		c->since = w.found ? 0 : c->tstate || !c->since || c->born != born ? now : c->since;
		c->born = born;
		c->tstate = w.found;
		c->head = head;
		c->head_id = head_id;
		c->ts = now;
	} else {
		struct py_thread upd = {.tstate = w.found, .head = head, .head_id = head_id, .ts = now,
					.since = w.found ? 0 : now, .born = born};

		bpf_map_update_elem(&py_threads, &tid, &upd, BPF_ANY);
	}
	if (*flags & TL_PYF_FAULT)
		return 0;
	if (hint) {
		hint->tstate = w.found;
		hint->gen = p->gen;
	}
	return w.found;
}

/* A frame walk's state lives in the scratch space (map memory), the
 * bpf_loop callback's context holds only the two pointers: the verifier
 * tracks a scalar on the stack exactly (depth 0, 1, 2 ... would each be a
 * state of their own, 0.25 M instructions verified per program, a second
 * of CPU at every start) and one in map memory as any value (the callback
 * is verified in a few passes). */
struct frame_walk {
	struct tl_py_proc *p;
	struct py_scratch *t;
};

/* One frame: 0 to go on, 1 when the walk is over. */
static __always_inline long frame_one(struct tl_py_proc *p, struct py_scratch *t)
{
	struct walk_state *w = &t->w;
	__u64 code, prev, ident, name, filename, instr;
	__u32 off, firstlineno, check, epoch = 0, depth = w->depth;
	struct code_slot *slot = NULL;

	if (!w->f)
		return 1;
	if (depth >= TL_PY_MAX_FRAMES) {
		w->flags |= TL_PYF_TRUNC;
		return 1;
	}
	__u64 at = w->f + p->fr_base;
	__u8 *win;

	if (at >= w->lo && at + TL_PY_WINDOW <= w->hi) {
		win = t->chunk + ((at - w->lo) & (TL_PY_CHUNK - 1));  /* read already, with the stack */
	} else {
		if (bpf_probe_read_user(t->fwin, TL_PY_WINDOW, (void *)at)) {
			w->flags |= TL_PYF_FAULT;
			return 1;
		}
		win = t->fwin;
	}
	off = p->fr_code;
	if (off > TL_PY_WINDOW - 8)
		return 1;
	code = *(__u64 *)(win + off);
	off = p->fr_previous;
	if (off > TL_PY_WINDOW - 8)
		return 1;
	prev = *(__u64 *)(win + off);
	off = p->fr_owner;
	if (off < TL_PY_WINDOW && win[off] == p->owner_skip) {
		w->f = prev;  /* a shim frame marking an entry from C: not Python code */
		return 0;
	}
	off = p->fr_instr;
	if (off > TL_PY_WINDOW - 8)
		return 1;
	instr = *(__u64 *)(win + off);
	if (p->instr_kind == TL_PY_INSTR_INDEX) {
		__s32 lasti = (__s32)instr;

		instr = lasti < 0 ? 0xFFFFFFFFULL : (__u64)lasti * 2;
	} else {
		__u64 first = code + p->co_code;

		instr = instr < first || instr - first >= 0xFFFFFFFFULL ? 0xFFFFFFFFULL : instr - first;
	}
	if (!code) {
		w->flags |= TL_PYF_FAULT;
		return 1;
	}
	if (p->code_cache) {
		epoch = p->frees[TL_PY_FREE_STRIPE(code)];  /* before the object is read */
		slot = &t->codes[(code >> 4) & (CODE_SLOTS - 1)];
		if (slot->code == code && slot->tgid == w->tgid && slot->gen == w->gen && slot->epoch == epoch) {
			check = slot->check;
			goto have_check;
		}
	}
	if (bpf_probe_read_user(t->cwin, TL_PY_WINDOW, (void *)(code + p->co_base))) {
		w->flags |= TL_PYF_FAULT;
		return 1;
	}
	off = p->co_firstlineno;
	if (off > TL_PY_WINDOW - 4)
		return 1;
	firstlineno = *(__u32 *)(t->cwin + off);
	off = p->co_name;
	if (off > TL_PY_WINDOW - 8)
		return 1;
	name = *(__u64 *)(t->cwin + off);
	off = p->co_filename;
	if (off > TL_PY_WINDOW - 8)
		return 1;
	filename = *(__u64 *)(t->cwin + off);
	off = p->co_version;
	if (off <= TL_PY_WINDOW - 4) {
		ident = *(__u32 *)(t->cwin + off);
	} else {  /* no version counter (3.10, 3.11): the name's hash and the file name's end */
		ident = STR_HASH_NONE;
		if (name)
			bpf_probe_read_user(&ident, 8, (void *)(name + p->str_hash));
		ident ^= str_tail(p, filename);
	}
	check = code_check(firstlineno, ident, name, filename);
	if (slot) {
		slot->code = code;
		slot->tgid = w->tgid;
		slot->gen = w->gen;
		slot->epoch = epoch;
		slot->check = check;
	}
have_check:;
	struct tl_py_frame *fr = &t->st.frames[depth & (TL_PY_MAX_FRAMES - 1)];

	fr->code = code;
	fr->instr = (__u32)instr;
	fr->check = check;
	w->h = mix(w->h, code);
	w->h = mix(w->h, ((__u64)fr->instr << 32) | fr->check);
	w->depth = depth + 1;
	w->f = prev;
	return 0;
}

/* FRAMES_PER_STEP frames per call of the bpf_loop callback: a call and its
 * return cost ~9 ns here (the kernel's return thunk, SRSO "safe RET"), a
 * third of a frame's cost. */
#define FRAMES_PER_STEP 4
#define FRAME_STEPS ((TL_PY_MAX_FRAMES + MAX_SKIPPED + FRAMES_PER_STEP - 1) / FRAMES_PER_STEP)

static long frame_step(__u64 i, void *data)
{
	struct frame_walk *fw = data;

#pragma unroll
	for (int k = 0; k < FRAMES_PER_STEP; k++)
		if (frame_one(fw->p, fw->t))
			return 1;
	return 0;
}

/* Walk the frames of tstate into t->st; returns the stack id (0: none). */
static __always_inline __u64 walk(struct tl_py_proc *p, __u64 tstate, struct py_scratch *t, __u32 tgid,
				  __u8 *flags)
{
	struct frame_walk fw = {.p = p, .t = t};
	struct walk_state *w = &t->w;
	__u64 f;
	int err = 0;

	f = ts_field(p, t, p->ts_frame, &err);
	if (!err && f && p->cframe_frame != TL_PY_NONE)
		f = read_u64(f + p->cframe_frame, &err);
	if (err) {
		*flags |= TL_PYF_FAULT;
		return 0;
	}
	w->f = f;
	w->lo = w->hi = 0;
	w->tgid = tgid;
	w->gen = p->gen;
	w->h = 0xCBF29CE484222325ULL;
	w->depth = 0;
	w->flags = 0;
	__u32 zero = 0;
	struct py_settings *set = bpf_map_lookup_elem(&py_settings, &zero);

	if (p->ts_datastack != TL_PY_NONE && !(set && set->no_chunk)) {  /* 3.11+: the frame stack's top, in one read */
		__u64 ds[2];  /* datastack_chunk, datastack_top */

		ds[0] = ts_field(p, t, p->ts_datastack, &err);
		ds[1] = ts_field(p, t, p->ts_datastack + 8, &err);
		if (!err && ds[0]) {
			__u64 lo = ds[0] + p->chunk_data, hi = ds[1];
			__u64 n;

			if (hi > lo + TL_PY_CHUNK)
				lo = hi - TL_PY_CHUNK;
			n = hi - lo;
			if (hi > lo && n <= TL_PY_CHUNK && !bpf_probe_read_user(t->chunk, n, (void *)lo)) {
				w->lo = lo;
				w->hi = hi;
			}
		}
	}
	if (bpf_loop(FRAME_STEPS, frame_step, &fw, 0) == FRAME_STEPS && w->f)
		w->flags |= TL_PYF_TRUNC;
	*flags |= w->flags;
	if (!w->depth) {
		if (!(*flags & TL_PYF_FAULT))
			*flags |= TL_PYF_NO_FRAME;
		return 0;
	}
	t->st.depth = w->depth;
	stat_add(ST_FRAMES, w->depth);
	return w->h ? w->h : 1;
}

static __always_inline __u64 take_stack_timed(struct tl_py_proc *p, struct py_scratch *t, struct tstate_hint *hint,
					      struct task_struct *task, __u32 tgid, __u32 tid, __u8 *flags);

/* The current thread's stack id (0: none), sending the stack if new. */
static __always_inline __u64 take_stack(struct tl_py_proc *p, struct py_scratch *t, struct tstate_hint *hint,
					struct task_struct *task, __u32 tgid, __u32 tid, __u8 *flags)
{
	__u64 t0 = bpf_ktime_get_ns(), id = take_stack_timed(p, t, hint, task, tgid, tid, flags);

	stat_add(ST_WALK_NS, bpf_ktime_get_ns() - t0);
	stat(ST_TIMED_WALKS);
	return id;
}

static __always_inline __u64 take_stack_timed(struct tl_py_proc *p, struct py_scratch *t, struct tstate_hint *hint,
					      struct task_struct *task, __u32 tgid, __u32 tid, __u8 *flags)
{
	struct seen_key key = {};
	struct tl_py_stack *rec;
	__u64 tstate, id;
	__u8 one = 1;

	stat(ST_WALKS);
	/* task is a trusted pointer (current, or sched_switch's prev): its fields load directly, no helper call */
	tstate = find_tstate(p, t, hint, tid, task->thread.fsbase, task->start_time, flags);
	if (!tstate) {
		stat(ST_NO_STATE);
		return 0;
	}
	id = walk(p, tstate, t, tgid, flags);
	if (*flags & TL_PYF_TRUNC)
		stat(ST_TRUNC);
	if (*flags & TL_PYF_FAULT)
		stat(ST_FAULT);
	if (!id) {
		stat(ST_NO_FRAME);
		return 0;
	}
	/* The stack this scratch sent or found seen last time (a loop syncing
	 * from one line): known to the plugin, no lookup.  Only a stack that
	 * went out is remembered, so a lost one is still sent again. */
	if (t->sent_id == id && t->sent_tgid == tgid && t->sent_gen == p->gen)
		return id;
	key.tgid = tgid;
	key.gen = p->gen;
	key.stack_id = id;
	if (bpf_map_lookup_elem(&py_seen, &key))
		goto sent;
	rec = bpf_ringbuf_reserve(&py_stacks, sizeof(*rec), 0);
	if (!rec) {
		stat(ST_STACKS_LOST);  /* not marked seen: sent the next time it is taken */
		return id;
	}
	t->st.stack_id = id;
	t->st.tgid = tgid;
	t->st.flags = *flags;
	t->st.pad = 0;
	bpf_probe_read_kernel(rec, sizeof(*rec), &t->st);
	bpf_ringbuf_submit(rec, 0);  /* wake the plugin: it reads the code objects while they live */
	bpf_map_update_elem(&py_seen, &key, &one, BPF_ANY);
	stat(ST_STACKS);
sent:
	t->sent_id = id;
	t->sent_tgid = tgid;
	t->sent_gen = p->gen;
	return id;
}

static __always_inline void emit(__u8 kind, __u64 ts, __u64 dur, __u64 stack, __u32 tid, __u32 tgid,
				 __u32 cookie, __u8 flags)
{
	struct tl_py_event *e = tl_reserve(&py_ring, TL_RING_PYSTACK, sizeof(*e));

	if (!e)
		return;
	e->ts = ts;
	e->dur = dur;
	e->stack_id = stack;
	e->tid = tid;
	e->tgid = tgid;
	e->cookie = cookie;
	e->cpu = bpf_get_smp_processor_id();
	e->kind = kind;
	e->flags = flags;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/* Is this launch one whose stack is taken: the thread's 1st, N+1st, 2N+1st
 * ... (N = launch_every)?  Most launches stop here, so this comes first and
 * is cheap: the thread's counter exists only once the thread was seen to be
 * a recorded thread of a Python process (the other checks cost two hash
 * lookups).  A driver launch inside a runtime launch of the same thread is
 * not a launch of its own: not counted.  Run through the cuda family's hook,
 * that family has already dropped such driver launches (it sees the runtime
 * call's return); only with its own uprobes does this guess by stack depth
 * and time, which also takes a library's launch (cuBLAS's static runtime)
 * made just after a runtime launch for a nested one. */
static __always_inline bool launch_due(struct pt_regs *ctx, struct task_struct *task, __u32 ck,
				       __u8 hooked)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32, zero = 0;
	struct py_settings *set = bpf_map_lookup_elem(&py_settings, &zero);
	struct py_launches *l;
	__u64 every = set ? set->launch_every : 0;

	if (!every)
		return false;
	l = bpf_task_storage_get(&py_launch, task, 0, 0);
	if (!l) {
		if (!tl_is_tracked(tid) || !bpf_map_lookup_elem(&py_procs, &tgid))
			return false;
		l = bpf_task_storage_get(&py_launch, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!l)
			return false;
	}
	if (!hooked) {
		if (!(ck & TL_PY_CK_DRIVER)) {
			l->rt_sp = ctx->sp;
			l->rt_jiffies = bpf_jiffies64();
		} else if (ctx->sp < l->rt_sp && bpf_jiffies64() - l->rt_jiffies <= NESTED_WINDOW_TICKS) {
			stat(ST_NESTED);
			return false;
		}
	}
	stat(ST_LAUNCHES);
	if (l->left) {
		l->left--;
		return false;
	}
	l->left = every - 1;
	return true;
}

/* tl_py_hook's cookie for each cuda probe id (the plugin fills it with the
 * ids whose stacks are taken): its attach cookie is the cuda family's. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TL_PY_CK_ID_MASK + 1);
	__type(key, __u32);
	__type(value, __u32);
} py_hook_cookie SEC(".maps");

static __always_inline int py_call(struct pt_regs *ctx, struct task_struct *task, __u32 ck, __u8 hooked,
				   __u64 ts);

SEC("uprobe")
int tl_py_call(struct pt_regs *ctx)
{
	return py_call(ctx, bpf_get_current_task_btf(), (__u32)bpf_get_attach_cookie(ctx), 0, 0);
}

/* The same, run by the cuda family's entry programs (a tail call through
 * their tl_call_hooks) where that family probes the call: one consumer of
 * the breakpoint instead of two.  That program's clock read and cookie are
 * handed over (tl_hook_take): the record's time is then its slice's entry,
 * to the nanosecond. */
SEC("uprobe")
int tl_py_hook(struct pt_regs *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 ts, cookie;
	__u32 id, *ck;

	if (!tl_hook_take(task->pid, &ts, &cookie)) {
		ts = 0;
		cookie = bpf_get_attach_cookie(ctx);
	}
	id = (__u32)cookie & TL_PY_CK_ID_MASK;
	ck = bpf_map_lookup_elem(&py_hook_cookie, &id);
	return ck ? py_call(ctx, task, *ck, TL_PYF_HOOKED, ts) : 0;
}

/* ts: when the call was entered, 0 to read the clock here. */
static __always_inline int py_call(struct pt_regs *ctx, struct task_struct *task, __u32 ck, __u8 hooked,
				   __u64 ts)
{
	__u32 tid, tgid;
	struct tl_py_proc *p;
	struct py_task *t;
	__u64 stack, dur = 0;
	__u8 flags = 0;
	bool timed = !ts;

	if ((ck & TL_PY_CK_LAUNCH) && !launch_due(ctx, task, ck, hooked))
		return 0;
	if (timed)
		ts = bpf_ktime_get_boot_ns();
	tid = task->pid;  /* a trusted pointer's fields: loads, not a helper call */
	tgid = task->tgid;
	/* py_task exists only for a thread found tracked before, and only its
	 * exit untracks a thread (a reused tid is a new task, without one):
	 * then no `tracked` lookup.  py_procs is looked up at every call: an
	 * exec deletes the process's entry. */
	t = bpf_task_storage_get(&py_task, task, 0, 0);
	if (!t && !tl_is_tracked(tid))
		return 0;
	p = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!p)
		return 0;
	if (!t)
		t = bpf_task_storage_get(&py_task, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t)
		return 0;
	stack = take_stack_timed(p, &t->s, &t->hint, task, tgid, tid, &flags);
	/* dur: how long the walk took, also what py_stats counts (one pair of
	 * clock reads for both).  The cuda family's program for the same hit
	 * stamps its slice before this one began or after it ended, never
	 * later than that by much: the converter joins them so.  Through the
	 * hook (TL_PYF_HOOKED) ts is that slice's own entry time and no clock
	 * is read here (dur 0): each read costs ~40 ns, a call's budget. */
	if (timed) {
		dur = bpf_ktime_get_boot_ns() - ts;
		stat_add(ST_WALK_NS, dur);
		stat(ST_TIMED_WALKS);
	}
	emit(TL_PY_CALL, ts, dur, stack, tid, tgid, ck & TL_PY_CK_ID_MASK, flags | hooked);
	return 0;
}

/* code_dealloc(PyCodeObject *), probed where its symbol is known: what
 * was cached of code objects before is no longer trusted. */
SEC("uprobe")
int tl_py_code_free(struct pt_regs *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct tl_py_proc *p = bpf_map_lookup_elem(&py_procs, &tgid);

	if (p && p->code_cache)
		__sync_fetch_and_add(&p->frees[TL_PY_FREE_STRIPE(PT_REGS_PARM1(ctx))], 1);
	return 0;
}

/* CPU sampling: a perf_event timer on every CPU (the plugin opens them,
 * --py-sample-hz); the recorded Python thread running there is sampled. */
#define TL_PF_EXITING 0x00000004  /* include/linux/sched.h PF_EXITING: set at do_exit's start */

SEC("perf_event")
int tl_py_sample(struct bpf_perf_event_data *ctx)
{
	__u64 ts = bpf_ktime_get_boot_ns(), id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32, zero = 0;
	struct py_scratch *s;
	struct tl_py_proc *p;
	__u64 stack;
	__u8 flags = 0;

	struct task_struct *task = bpf_get_current_task_btf();

	if (!tl_is_tracked(tid))
		return 0;
	/* An exiting thread stays tracked until its last switch-out, tens of µs past
	 * its exit record: a sample there would outlive the thread in the trace (and
	 * trace_processor would give it a second, ghost thread). */
	if (task->flags & TL_PF_EXITING)
		return 0;
	p = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!p)
		return 0;
	s = bpf_map_lookup_elem(&py_sample_scratch, &zero);
	if (!s)
		return 0;
	stack = take_stack(p, s, NULL, task, tgid, tid, &flags);  /* a per-CPU scratch: no hint */
	emit(TL_PY_SAMPLE, ts, 0, stack, tid, tgid, 0, flags);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(tl_py_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	struct tl_py_proc *p;
	struct py_task *t;
	__u32 tid, tgid, zero = 0;
	__u64 now = 0, stack;
	__u8 flags = 0;

	/* The thread switched in: was it blocked in Python? */
	t = bpf_task_storage_get(&py_task, next, 0, 0);
	if (t && t->wait_ts) {
		struct py_settings *s = bpf_map_lookup_elem(&py_settings, &zero);
		__u64 dur;

		now = bpf_ktime_get_boot_ns();
		dur = now - t->wait_ts;
		if (!s || dur >= s->min_wait_ns) {
			emit(TL_PY_WAIT, t->wait_ts, dur, t->wait_stack, next->pid, next->tgid, 0, t->wait_flags);
			stat(ST_WAITS);
		} else {
			stat(ST_SHORT_WAITS);
		}
		t->wait_ts = 0;
	}
	/* Preempted, or not sleeping (S) or blocked (D): not a wait. */
	if (preempt || !(prev_state & 3))
		return 0;
	tid = prev->pid;
	if (!tl_is_tracked(tid))
		return 0;
	tgid = prev->tgid;
	p = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!p)
		return 0;
	t = bpf_task_storage_get(&py_task, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t)
		return 0;
	stack = take_stack(p, &t->s, &t->hint, prev, tgid, tid, &flags);
	if (!stack)
		return 0;  /* a thread without Python frames: nothing to show for its wait */
	t->wait_ts = now ? now : bpf_ktime_get_boot_ns();
	t->wait_stack = stack;
	t->wait_flags = flags;
	return 0;
}

/* A forked child runs its parent's interpreter: same layout, same addresses.
 * Copying the entry now lets a DataLoader worker's stacks be taken from its
 * first wait, before the plugin has looked at it. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(tl_py_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	struct tl_py_proc *p, copy;

	if (ptgid == ctgid)
		return 0;  /* a thread */
	p = bpf_map_lookup_elem(&py_procs, &ptgid);
	if (!p)
		return 0;
	/* Not its parent's code cache: code_dealloc is probed per process (the
	 * plugin attaches the child's when it looks at it and turns it on). */
	copy = *p;
	copy.code_cache = 0;
	bpf_map_update_elem(&py_procs, &ctgid, &copy, BPF_ANY);
	return 0;
}

/* A new image: whatever it runs, the old layout no longer applies; the
 * plugin is woken to look at it at once (a short job may be over before
 * its next look at the process list). */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(tl_py_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = p->tgid;
	struct tl_py_stack *rec;

	bpf_map_delete_elem(&py_procs, &tgid);
	if (!tl_is_tracked(p->pid))
		return 0;
	rec = bpf_ringbuf_reserve(&py_stacks, sizeof(*rec), 0);
	if (!rec)
		return 0;
	rec->stack_id = 0;
	rec->tgid = tgid;
	rec->depth = 0;
	rec->flags = TL_PYF_EXEC;
	rec->pad = 0;
	bpf_ringbuf_submit(rec, 0);
	return 0;
}
