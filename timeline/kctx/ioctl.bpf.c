// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ioctl(2) calls of the tracked tree: one record per call, at sys_exit.
 *
 * The fd is resolved to its file at sys_enter (device number, type, dentry
 * names) because that is when it is known to be open.  By default only
 * calls on NVIDIA device nodes become records; every other ioctl is counted
 * per (tgid, request) in `ioctl_counts`, which the recorder reads.  Setting
 * ioctl_config[0] bit 0 records every ioctl.
 */
#include "tracking.bpf.h"
#include "ioctl_records.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct tl_ioctl_event tl_ioctl_event_layout = {};

#define S_IFMT  0170000
#define S_IFCHR 0020000
#define NV_IOCTL_MAGIC 'F'        /* nv-ioctl-numbers.h */
#define NV_ESC_RM_ALLOC_OBJECT 0x28 /* nv_escape.h */
#define NV_ESC_RM_CONTROL 0x2A
#define NV_ESC_RM_ALLOC 0x2B
#define NV_ESC_IOCTL_XFER_CMD 211 /* NV_IOCTL_BASE + 11 */
#define CFG_RECORD_ALL 1

struct tl_ioctl_count_key {
	__u32 tgid;
	__u32 request;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} ioctl_ring SEC(".maps");

/* Calls between sys_enter and sys_exit, by tid.  LRU: a thread killed in
 * the middle of a call must not leak its slot forever. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct tl_ioctl_event);
} ioctl_inflight SEC(".maps");

/* Ioctls that were not recorded, counted. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct tl_ioctl_count_key);
	__type(value, __u64);
} ioctl_counts SEC(".maps");

/* [0]: CFG_RECORD_ALL.  A map, not rodata, so the recorder can set it after
 * the objects are loaded. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} ioctl_config SEC(".maps");

/* Scratch for building a record: 128 bytes is a large share of the stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tl_ioctl_event);
} ioctl_scratch SEC(".maps");

static __always_inline void count_other(__u32 tgid, __u32 request)
{
	struct tl_ioctl_count_key k = { .tgid = tgid, .request = request };
	__u64 one = 1, *n = bpf_map_lookup_elem(&ioctl_counts, &k);

	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&ioctl_counts, &k, &one, BPF_NOEXIST);
}

/* fd -> struct file of the current task, NULL if it is not open. */
static __always_inline struct file *fd_file(__u32 fd)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds, *f = NULL;

	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]))
		return NULL;
	return f;
}

/* NVIDIA RM escapes carry the interesting number inside their argument:
 * the control command (NVOS54_PARAMETERS.cmd, offset 8) or the class of
 * the object allocated (NVOS21/NVOS64/NVOS05 hClass, offset 12).
 * NV_ESC_IOCTL_XFER_CMD wraps another escape: {u32 cmd; u32 size; u64 ptr}. */
static __always_inline void nv_detail(struct tl_ioctl_event *e, __u64 arg)
{
	__u32 esc = e->request & 0xff, w[4];

	if (((e->request >> 8) & 0xff) != NV_IOCTL_MAGIC)
		return;
	if (esc == NV_ESC_IOCTL_XFER_CMD) {
		struct { __u32 cmd; __u32 size; __u64 ptr; } x;

		if (bpf_probe_read_user(&x, sizeof(x), (void *)arg))
			return;
		esc = x.cmd & 0xff;
		arg = x.ptr;
		e->flags |= TL_IOF_XFER;
	}
	e->esc = esc;
	if (esc != NV_ESC_RM_CONTROL && esc != NV_ESC_RM_ALLOC && esc != NV_ESC_RM_ALLOC_OBJECT)
		return;
	if (bpf_probe_read_user(w, sizeof(w), (void *)arg))
		return;
	e->detail = esc == NV_ESC_RM_CONTROL ? w[2] : w[3];
	e->flags |= TL_IOF_DETAIL;
}

/* NVIDIA nodes (nvidiactl, nvidia0..N, nvidia-uvm, nvidia-modeset,
 * nvidia-caps/...) are all char devices named nvidia*; their majors are
 * partly dynamic, the names are not. */
static __always_inline bool is_nvidia(__u16 mode, const char *p)
{
	return (mode & S_IFMT) == S_IFCHR && p[0] == 'n' && p[1] == 'v' && p[2] == 'i' &&
	       p[3] == 'd' && p[4] == 'i' && p[5] == 'a';
}

SEC("tp/syscalls/sys_enter_ioctl")
int tl_ioctl_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32, zero = 0;
	/* ctx fields into locals first (see sched.bpf.c). */
	__u32 fd = ctx->args[0], request = ctx->args[1];
	__u64 arg = ctx->args[2];

	if (!tl_is_tracked(tid))
		return 0;
	__u32 *cfg = bpf_map_lookup_elem(&ioctl_config, &zero);
	struct file *f = fd_file(fd);
	struct dentry *d = NULL;
	struct inode *ino = NULL;
	const unsigned char *dname = NULL;
	char pfx[8] = {};
	__u16 mode = 0;

	if (f) {
		ino = BPF_CORE_READ(f, f_inode);
		d = BPF_CORE_READ(f, f_path.dentry);
		mode = BPF_CORE_READ(ino, i_mode);
		dname = BPF_CORE_READ(d, d_name.name);
		if ((mode & S_IFMT) == S_IFCHR)
			bpf_probe_read_kernel_str(pfx, sizeof(pfx), dname);
	}
	bool nv = is_nvidia(mode, pfx);
	/* The common case in the default mode: counted, nothing else read. */
	if (!nv && !(cfg && (*cfg & CFG_RECORD_ALL))) {
		count_other(tgid, request);
		return 0;
	}
	struct tl_ioctl_event *e = bpf_map_lookup_elem(&ioctl_scratch, &zero);
	if (!e)
		return 0;
	__builtin_memset(e, 0, sizeof(*e));
	e->ts = bpf_ktime_get_boot_ns();
	e->tid = tid;
	e->tgid = tgid;
	e->fd = fd;
	e->request = request;
	e->kind = TL_IOCTL_CALL;
	e->mode = mode;
	if (f) {
		e->rdev = BPF_CORE_READ(ino, i_rdev);
		e->ino = BPF_CORE_READ(ino, i_ino);
		bpf_probe_read_kernel_str(e->name, sizeof(e->name), dname);
		bpf_probe_read_kernel_str(e->parent, sizeof(e->parent), BPF_CORE_READ(d, d_parent, d_name.name));
	} else {
		e->flags |= TL_IOF_NOFILE;
	}
	if (nv) {
		e->flags |= TL_IOF_NVIDIA;
		nv_detail(e, arg);
	}
	bpf_map_update_elem(&ioctl_inflight, &tid, e, BPF_ANY);
	return 0;
}

SEC("tp/syscalls/sys_exit_ioctl")
int tl_ioctl_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__s64 ret = ctx->ret;
	struct tl_ioctl_event *s = bpf_map_lookup_elem(&ioctl_inflight, &tid);

	if (!s)
		return 0;
	struct tl_ioctl_event *e = tl_reserve(&ioctl_ring, TL_RING_IOCTL, sizeof(*e));
	if (!e) {
		bpf_map_delete_elem(&ioctl_inflight, &tid);
		return 0;
	}
	__builtin_memcpy(e, s, sizeof(*e));
	e->dur = bpf_ktime_get_boot_ns() - e->ts;
	e->ret = ret;
	e->cpu = bpf_get_smp_processor_id();
	bpf_map_delete_elem(&ioctl_inflight, &tid);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}
