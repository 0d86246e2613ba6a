// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Entry point of timeline's CUDA injection library (libtimeline_inject.so).
 * The CUDA driver dlopens CUDA_INJECTION64_PATH at cuInit and calls
 * InitializeInjection; the NVTX loader calls InitializeInjectionNvtx2 (nvtx.c).
 * Nothing happens unless TIMELINE_GPU_SOCKET names the recorder's socket.
 * Whatever fails, the target runs on: the library goes inert and its HELLO
 * message says why.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "inject.h"
#include "cupti_fns.h"

extern char tl_activity_enabled[512];
extern char tl_cupti_preloaded[1024];
void tl_strings_atfork_prepare(void);
void tl_strings_atfork_parent(void);
void tl_strings_atfork_child(void);
void tl_nvtx_atfork_child(void);
extern int tl_nvtx_active;

static struct {
	int cuda_init;         /* InitializeInjection ran in this process (or its parent) */
	int active;            /* CUPTI activity enabled */
	int major;
	pid_t parent;          /* the process this state was inherited from, if forked */
	char cupti_path[1024];
	char reason[768];
} st;

uint64_t tl_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* getpid() is a system call (glibc does not cache it): ~230 ns here, too much
 * for every NVTX range.  Cached, and renewed in the child by atfork_child. */
static pid_t cached_pid;
pid_t tl_getpid(void)
{
	if (!cached_pid)
		cached_pid = getpid();
	return cached_pid;
}

uint32_t tl_gettid(void)
{
	static __thread uint32_t tid;
	static __thread pid_t tid_pid;
	pid_t pid = tl_getpid();

	if (!tid || tid_pid != pid) {  /* a forked child's thread has a new tid */
		tid = (uint32_t)syscall(SYS_gettid);
		tid_pid = pid;
	}
	return tid;
}

size_t tl_json_str(char *out, size_t cap, const char *s)
{
	size_t o = 0;

	if (cap < 3)
		return 0;
	out[o++] = '"';
	for (; s && *s && o + 8 < cap; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else if (c < 0x20) {
			o += snprintf(out + o, cap - o, "\\u%04x", c);
		} else {
			out[o++] = (char)c;
		}
	}
	out[o++] = '"';
	out[o] = 0;
	return o;
}

/* HELLO payload: what this library does in this process, or why not. */
size_t tl_hello_json(char *buf, size_t cap)
{
	char path[1100], reason[1600], pre[1100];
	int n;

	tl_json_str(path, sizeof(path), st.cupti_path);
	tl_json_str(reason, sizeof(reason), st.reason);
	tl_json_str(pre, sizeof(pre), tl_cupti_preloaded);
	n = snprintf(buf, cap,
		     "{\"library\":\"timeline-inject\",\"pid\":%d,\"forked_from\":%d,\"cuda_injection\":%s,"
		     "\"active\":%s,\"reason\":%s,\"cupti_path\":%s,\"cupti_version\":%u,\"record_layout\":%d,"
		     "\"runtime_major\":%d,\"enabled\":[%s],\"nvtx\":%s,\"clock\":\"CLOCK_BOOTTIME\","
		     "\"record_size\":%zu,\"cupti_preloaded\":%s}",
		     (int)getpid(), (int)st.parent, st.cuda_init ? "true" : "false", st.active ? "true" : "false",
		     reason, path, tl_cupti.version, tl_cupti.layout, st.major, tl_activity_enabled,
		     tl_nvtx_active ? "true" : "false", sizeof(struct tl_gpu_record), pre);
	if (n < 0)
		return 0;
	return (size_t)n < cap ? (size_t)n : cap - 1;
}

/* Registered after libcupti is loaded, so it runs before libcupti's own exit
 * teardown (atexit handlers run in reverse order of registration). */
static void cupti_at_exit(void)
{
	if (st.active && st.parent == 0)
		tl_activity_flush(1);  /* completes every buffer through buffer_completed */
}

static void at_exit(void)
{
	tl_nvtx_flush_all(1);
	/* A forked child that never sent anything (a DataLoader worker without
	 * NVTX) does not connect just to say so. */
	if ((st.active && st.parent == 0) || tl_channel_connected())
		tl_channel_send_status("exit");
}

static void atfork_child(void)
{
	cached_pid = getpid();
	tl_channel_atfork_child();
	tl_strings_atfork_child();
	tl_nvtx_atfork_child();
	/* CUDA does not work in a forked child: its CUPTI buffers stay the parent's. */
	st.parent = getppid();
	tl_activity_enabled[0] = 0;
}

static void setup_once(void)
{
	pthread_atfork(tl_strings_atfork_prepare, tl_strings_atfork_parent, atfork_child);
	atexit(at_exit);
}

/* Once per process, from whichever entry point (CUDA or NVTX) comes first. */
void tl_process_setup(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, setup_once);
}

TL_EXPORT int InitializeInjection(void)
{
	static int done;
	const char *why;

	if (__atomic_exchange_n(&done, 1, __ATOMIC_SEQ_CST))
		return 1;
	if (!tl_channel_enabled())
		return 1;  /* not launched by timeline's recorder: stay out of the way */
	tl_process_setup();
	st.cuda_init = 1;
	why = tl_cupti_load(st.cupti_path, sizeof(st.cupti_path), &st.major);
	if (!why)
		why = tl_activity_start();
	if (why) {
		snprintf(st.reason, sizeof(st.reason), "%s", why);
	} else {
		st.active = 1;
		atexit(cupti_at_exit);
	}
	/* Connecting sends HELLO; when NVTX connected first, a second HELLO updates it. */
	tl_channel_hello();
	return 1;
}
