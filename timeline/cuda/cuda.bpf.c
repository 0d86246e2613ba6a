// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * CUDA runtime, driver and NCCL calls of the tracked tree.
 *
 * Three generic programs serve every probed function; the attach cookie says
 * which function it is and what to copy (TL_CK_* in records.h).  Arguments are
 * copied raw and decoded in user space, in bulk.
 *
 *   tl_cuda_entry  uprobe, entry-only: one record at entry (lowest cost).
 *   tl_cuda_enter  uprobe: stash the entry on a per-thread stack.
 *   tl_cuda_exit   uretprobe: pop the matching entry, emit one record with
 *                  duration, return value and a value returned through a
 *                  pointer argument (cudaMalloc's *devPtr).
 *
 * Double counting: a driver call made while a traced runtime call of the same
 * thread is in flight (cudaLaunchKernel -> cuLaunchKernel) is dropped, and
 * counted in cuda_stats.  Frames are matched by stack pointer, so a missed
 * return (longjmp, a probe attached mid-call) never leaves a stale marker.
 */
#include "tracking.bpf.h"
#include "records.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct tl_cuda_event tl_cuda_event_layout = {};

/* An entry-only runtime launch has no return to clear its in-flight mark:
 * a driver launch deeper on the stack within this window counts as nested. */
const volatile __u64 pending_window_ns = 2000000;

#define DEPTH 4            /* traced calls in flight per thread (a power of two) */
#define SLOT(i) ((i) & (DEPTH - 1))  /* an index the verifier can see is bounded */
#define STAT_NESTED 0      /* driver calls dropped inside runtime calls */
#define STAT_STASH_FULL 1  /* calls recorded entry-only: stash full */
#define STAT_LOST 2        /* stashed entries whose return never came (longjmp...) */
#define STAT_NOSTORE 3     /* task storage unavailable: recorded entry-only */
#define NSTATS 4

struct frame {
	__u64 ts;
	__u64 sp;          /* stack pointer at entry: the return address slot */
	__u64 cookie;
	__u64 args[9];
};

struct tls {
	__u32 depth;
	__u32 pad;
	__u64 pending_ts;  /* last entry-only runtime launch */
	__u64 pending_sp;
	struct frame f[DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tls);
} cuda_tls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NSTATS);
	__type(key, __u32);
	__type(value, __u64);
} cuda_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);  /* ~120k records: 0.1 s of 1M calls/s */
} cuda_ring SEC(".maps");

/* Programs another family runs at a probed call's entry, by the probe's id
 * (TL_CK_ID_MASK bits of the cookie): tail calls from this family's entry
 * programs, so that a call has one uprobe consumer, not one per family.
 * An empty slot falls through. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, TL_CK_ID_MASK + 1);
	__type(key, __u32);
	__type(value, __u32);
} tl_call_hooks SEC(".maps");

static __always_inline int run_hook(struct pt_regs *ctx, __u64 ts, __u64 ck, __u32 tid)
{
	tl_hook_pass(ts, ck, tid);  /* the hook's time is this call's entry, its cookie ours */
	bpf_tail_call(ctx, &tl_call_hooks, (__u32)(ck & TL_CK_ID_MASK));
	return 0;
}

static __always_inline void stat(__u32 i)
{
	__u64 *n = bpf_map_lookup_elem(&cuda_stats, &i);

	if (n)
		*n += 1;
}

/* Registers and the extra argument memory the cookie asks for. */
static __always_inline void read_args(struct pt_regs *ctx, __u64 ck, __u64 *a)
{
	a[0] = ctx->di;
	a[1] = ctx->si;
	a[2] = ctx->dx;
	a[3] = ctx->cx;
	a[4] = ctx->r8;
	a[5] = ctx->r9;  /* libbpf 1.1 has no PT_REGS_PARM6 */
	a[6] = a[7] = a[8] = 0;
	if (ck & TL_CK_CONFIG)
		bpf_probe_read_user(&a[4], 40, (void *)a[0]);
	else if (ck & TL_CK_STACK)
		bpf_probe_read_user(&a[6], 24, (void *)(ctx->sp + 8));
}

static __always_inline struct tl_cuda_event *reserve(__u64 ts, __u64 ck, __u8 kind)
{
	struct tl_cuda_event *e = tl_reserve(&cuda_ring, TL_RING_CUDA, sizeof(*e));
	__u64 id;

	if (!e)
		return NULL;
	id = bpf_get_current_pid_tgid();
	e->ts = ts;
	e->dur = 0;
	e->ret = 0;
	e->out = 0;
	e->cookie = ck;
	e->tid = (__u32)id;
	e->tgid = id >> 32;
	e->cpu = bpf_get_smp_processor_id();
	e->kind = kind;
	e->flags = 0;
	e->pad = 0;
	return e;
}

static __always_inline int emit_entry(struct pt_regs *ctx, __u64 ts, __u64 ck)
{
	struct tl_cuda_event *e = reserve(ts, ck, TL_CUDA_ENTRY);

	if (!e)
		return 0;
	read_args(ctx, ck, e->args);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

/* Drop frames whose call must have returned: at an entry, those at or above
 * this call's stack pointer.  Returns the frames left (all ancestors). */
static __always_inline __u32 prune_entry(struct tls *t, __u64 sp)
{
	__u32 d = t->depth;

	for (int i = 0; i < DEPTH; i++) {
		if (d == 0 || d > DEPTH)
			break;
		if (t->f[SLOT(d - 1)].sp > sp)
			break;
		d--;
		stat(STAT_LOST);
	}
	if (d > DEPTH)
		d = 0;
	t->depth = d;
	return d;
}

/* Is a traced runtime call of this thread in flight below us (an ancestor)? */
static __always_inline bool in_runtime(struct tls *t, __u32 d, __u64 ts, __u64 sp, __u64 ck)
{
	for (int i = 0; i < DEPTH; i++) {
		if (i >= d)
			break;
		if (t->f[SLOT(i)].cookie & TL_CK_RUNTIME)
			return true;
	}
	if ((ck & TL_CK_LAUNCH) && t->pending_ts && t->pending_sp > sp &&
	    ts - t->pending_ts < pending_window_ns) {
		t->pending_ts = 0;  /* one runtime launch makes one driver launch */
		return true;
	}
	return false;
}

static __always_inline struct tls *tls_get(bool create)
{
	return bpf_task_storage_get(&cuda_tls, bpf_get_current_task_btf(), 0,
				    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

SEC("uprobe")
int tl_cuda_entry(struct pt_regs *ctx)
{
	__u64 ck = bpf_get_attach_cookie(ctx), ts = bpf_ktime_get_boot_ns();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (!tl_is_tracked(tid))
		return 0;
	if (ck & (TL_CK_RUNTIME | TL_CK_DRIVER)) {
		struct tls *t = tls_get(true);

		if (t) {
			__u64 sp = ctx->sp;
			__u32 d = prune_entry(t, sp);

			if ((ck & TL_CK_DRIVER) && in_runtime(t, d, ts, sp, ck)) {
				stat(STAT_NESTED);
				return 0;
			}
			if ((ck & TL_CK_RUNTIME) && (ck & TL_CK_LAUNCH)) {
				t->pending_ts = ts;
				t->pending_sp = sp;
			}
		}
	}
	emit_entry(ctx, ts, ck);
	return run_hook(ctx, ts, ck, tid);
}

SEC("uprobe")
int tl_cuda_enter(struct pt_regs *ctx)
{
	__u64 ck = bpf_get_attach_cookie(ctx), ts = bpf_ktime_get_boot_ns();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct tls *t;
	__u32 d;

	if (!tl_is_tracked(tid))
		return 0;
	t = tls_get(true);
	if (!t) {
		stat(STAT_NOSTORE);
		emit_entry(ctx, ts, ck);
		return run_hook(ctx, ts, ck, tid);
	}
	d = prune_entry(t, ctx->sp);
	if ((ck & TL_CK_DRIVER) && in_runtime(t, d, ts, ctx->sp, ck)) {
		stat(STAT_NESTED);
		return 0;
	}
	if (d >= DEPTH) {
		stat(STAT_STASH_FULL);
		emit_entry(ctx, ts, ck);
		return run_hook(ctx, ts, ck, tid);
	}
	struct frame *f = &t->f[SLOT(d)];

	f->ts = ts;
	f->sp = ctx->sp;
	f->cookie = ck;
	read_args(ctx, ck, f->args);
	t->depth = d + 1;
	return run_hook(ctx, ts, ck, tid);
}

SEC("uretprobe")
int tl_cuda_exit(struct pt_regs *ctx)
{
	struct tls *t = tls_get(false);
	__u64 entry_sp = ctx->sp - 8;  /* the return address was popped */
	__u64 now, ck;
	__u32 d;

	if (!t)
		return 0;
	d = t->depth;
	/* Frames deeper than the returning call lost their return: drop them. */
	for (int i = 0; i < DEPTH; i++) {
		if (d == 0 || d > DEPTH)
			break;
		if (t->f[SLOT(d - 1)].sp >= entry_sp)
			break;
		d--;
		stat(STAT_LOST);
	}
	/* No frame of ours: a dropped nested call, or entered before attach. */
	if (d == 0 || d > DEPTH || t->f[SLOT(d - 1)].sp != entry_sp) {
		if (d <= DEPTH)
			t->depth = d;
		return 0;
	}
	t->depth = d - 1;
	struct frame *f = &t->f[SLOT(d - 1)];

	now = bpf_ktime_get_boot_ns();
	ck = f->cookie;
	struct tl_cuda_event *e = reserve(f->ts, ck, TL_CUDA_CALL);
	if (!e)
		return 0;
	__builtin_memcpy(e->args, f->args, sizeof(e->args));
	e->dur = now - f->ts;
	e->ret = ctx->ax;
	e->flags = TL_CF_HAS_RET;
	__u32 out = (ck >> TL_CK_OUT_SHIFT) & 15;
	if (out && !bpf_probe_read_user(&e->out, 8, (void *)f->args[(out - 1) & 7]))
		e->flags |= TL_CF_OUT;
	__u32 str = (ck >> TL_CK_STR_SHIFT) & 15;
	__u64 str_ptr = str ? f->args[(str - 1) & 7] : 0;
	__u64 out_val = e->out, ret = e->ret, ts = f->ts;
	__u8 flags = e->flags;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);

	if (!str_ptr)
		return 0;
	/* A name argument (cuModuleGetFunction): a second record carries it. */
	e = reserve(ts, ck, TL_CUDA_NAME);
	if (!e)
		return 0;
	long n = bpf_probe_read_user_str(e->args, sizeof(e->args), (void *)str_ptr);
	if (n < 0)
		e->args[0] = 0;
	e->ret = ret;
	e->out = out_val;
	e->flags = flags | (n >= (long)sizeof(e->args) ? TL_CF_TRUNC : 0);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}
