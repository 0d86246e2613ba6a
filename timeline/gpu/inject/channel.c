// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The connection to the recorder: one SOCK_STREAM connection to the abstract
 * unix socket TIMELINE_GPU_SOCKET per process, messages per ../records.h.
 * Whole batches go out in one sendmsg; a send that cannot finish within
 * SEND_TIMEOUT_S (recorder stuck) or fails (recorder gone) ends the
 * connection for good: later batches are counted as lost, never waited on.
 * A forked child (DataLoader worker) never writes into its parent's
 * connection: it connects anew on its first message.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>
#include "inject.h"

#define SEND_TIMEOUT_S 2

struct tl_counters tl_count;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int fd = -1;
static pid_t fd_pid;
static int given_up;   /* connection failed or broke in this process */

size_t tl_hello_json(char *buf, size_t cap);            /* inject.c */
size_t tl_strings_take_pending(char **payload);         /* strings.c */

int tl_channel_enabled(void)
{
	const char *name = getenv("TIMELINE_GPU_SOCKET");
	return name && *name && !given_up;
}

static void drop_connection_locked(void)
{
	if (fd >= 0)
		close(fd);
	fd = -1;
	given_up = 1;
}

static int send_all_locked(const struct iovec *iov_in, int n)
{
	struct iovec iov[4];
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = n };

	memcpy(iov, iov_in, n * sizeof(*iov));
	while (mh.msg_iovlen) {
		ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;  /* EPIPE: recorder gone; EAGAIN: send timeout */
		}
		while (mh.msg_iovlen && (size_t)w >= mh.msg_iov->iov_len) {
			w -= mh.msg_iov->iov_len;
			mh.msg_iov++;
			mh.msg_iovlen--;
		}
		if (mh.msg_iovlen) {
			mh.msg_iov->iov_base = (char *)mh.msg_iov->iov_base + w;
			mh.msg_iov->iov_len -= w;
		}
	}
	return 0;
}

static int send_msg_locked(uint32_t type, const void *payload, size_t len)
{
	struct tl_gpu_msg h = { .type = type, .len = (uint32_t)len };
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)payload, len } };

	if (len > TL_GPU_MSG_MAX_LEN || send_all_locked(iov, len ? 2 : 1)) {
		drop_connection_locked();
		return -1;
	}
	tl_count.messages_sent++;
	return 0;
}

static int connect_locked(void)
{
	const char *name = getenv("TIMELINE_GPU_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = SEND_TIMEOUT_S };
	size_t n;
	char hello[8192];  /* HELLO's largest: ~4.8 KB */

	if (fd >= 0 && fd_pid == tl_getpid())
		return 0;
	if (fd >= 0) {  /* inherited across fork without atfork (e.g. vfork-like paths) */
		close(fd);
		fd = -1;
	}
	if (given_up || !name || !*name)
		return -1;
	n = strlen(name);
	if (n + 1 > sizeof(sa.sun_path)) {
		given_up = 1;
		return -1;
	}
	memcpy(sa.sun_path + 1, name, n);  /* abstract namespace: leading NUL */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		given_up = 1;
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, offsetof(struct sockaddr_un, sun_path) + 1 + n)) {
		drop_connection_locked();
		return -1;
	}
	fd_pid = tl_getpid();
	tl_count.reconnects++;
	tl_strings_resend_all();
	n = tl_hello_json(hello, sizeof(hello));
	return send_msg_locked(TL_GPU_MSG_HELLO, hello, n);
}

int tl_channel_connected(void)
{
	int r;

	pthread_mutex_lock(&lock);
	r = fd >= 0 && fd_pid == tl_getpid();
	pthread_mutex_unlock(&lock);
	return r;
}

void tl_channel_hello(void)
{
	char hello[8192];  /* HELLO's largest: ~4.8 KB */
	size_t n;

	pthread_mutex_lock(&lock);
	if (fd >= 0 && fd_pid == tl_getpid()) {
		n = tl_hello_json(hello, sizeof(hello));
		send_msg_locked(TL_GPU_MSG_HELLO, hello, n);
	} else {
		connect_locked();  /* sends HELLO */
	}
	pthread_mutex_unlock(&lock);
}

/* Pending strings go first, so every id a record names is defined before it. */
static int send_strings_locked(void)
{
	char *payload = NULL;
	size_t len = tl_strings_take_pending(&payload);
	int r = 0;

	while (len && !r) {  /* entries are never split: take_pending bounds len */
		r = send_msg_locked(TL_GPU_MSG_STRINGS, payload, len);
		free(payload);
		payload = NULL;
		len = r ? 0 : tl_strings_take_pending(&payload);
	}
	free(payload);
	return r;
}

int tl_channel_send(uint32_t type, const void *payload, size_t len)
{
	int r;

	pthread_mutex_lock(&lock);
	r = connect_locked();
	if (!r)
		r = send_strings_locked();
	if (!r)
		r = send_msg_locked(type, payload, len);
	pthread_mutex_unlock(&lock);
	return r;
}

int tl_channel_send_records(const struct tl_gpu_record *rec, size_t n)
{
	const size_t per_msg = TL_GPU_MSG_MAX_LEN / sizeof(*rec);
	int r;

	pthread_mutex_lock(&lock);
	r = connect_locked();
	if (!r)
		r = send_strings_locked();
	while (n) {
		size_t k = n < per_msg ? n : per_msg;
		if (!r)
			r = send_msg_locked(TL_GPU_MSG_RECORDS, rec, k * sizeof(*rec));
		if (r)
			tl_count.records_lost += k;
		else
			tl_count.records_sent += k;
		rec += k;
		n -= k;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

void tl_channel_send_status(const char *when)
{
	char buf[1024];
	int n = snprintf(buf, sizeof(buf),
			 "{\"when\":\"%s\",\"records_sent\":%llu,\"records_lost\":%llu,"
			 "\"buffers_lost\":%llu,\"cupti_dropped\":%llu,\"cupti_buffers\":%llu,"
			 "\"nvtx_records\":%llu,\"pid\":%d}",
			 when, (unsigned long long)tl_count.records_sent,
			 (unsigned long long)tl_count.records_lost, (unsigned long long)tl_count.buffers_lost,
			 (unsigned long long)tl_count.cupti_dropped, (unsigned long long)tl_count.cupti_buffers,
			 (unsigned long long)tl_count.nvtx_records, (int)getpid());
	tl_channel_send(TL_GPU_MSG_STATUS, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* In the child after fork(): the parent's connection and lock state are not ours. */
void tl_channel_atfork_child(void)
{
	pthread_mutex_init(&lock, NULL);
	if (fd >= 0)
		close(fd);
	fd = -1;
	memset(&tl_count, 0, sizeof(tl_count));
}
