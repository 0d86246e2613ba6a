// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The process's string table (kernel names, NVTX messages and domains):
 * content -> id, ids from 1.  New strings are sent in a STRINGS message
 * before the records that use them (channel.c); a new connection (forked
 * child) gets the whole table again.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "inject.h"

#define MAX_STRINGS (1u << 20)
#define MAX_BYTES (64u << 20)
#define MAX_LEN 4096            /* longer names are cut (C++ templates can be huge) */

struct entry { uint32_t hash, id; };
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *table;      /* open addressing, cap slots */
static uint32_t cap;
static char *arena;              /* entries {u32 id; u32 len; text} back to back = the wire format */
static size_t arena_len, arena_cap;
static size_t *offset_of;        /* id -> arena offset */
static uint32_t count;           /* ids 1..count */
static size_t sent_upto;         /* arena bytes already sent on this connection */

static uint32_t hash_bytes(const char *s, size_t n)
{
	uint32_t h = 2166136261u;  /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h ? h : 1;
}

static int same(uint32_t id, const char *s, size_t n)
{
	const char *e = arena + offset_of[id];
	uint32_t len;
	memcpy(&len, e + 4, 4);
	return len == n && !memcmp(e + 8, s, n);
}

static int grow_locked(void)
{
	uint32_t ncap = cap ? cap * 2 : 1024;
	struct entry *nt = calloc(ncap, sizeof(*nt));
	size_t *noff = realloc(offset_of, (size_t)(ncap / 2 + 1) * sizeof(*noff));

	if (!nt || !noff) {
		free(nt);
		if (noff)
			offset_of = noff;
		return -1;
	}
	offset_of = noff;
	for (uint32_t i = 0; i < cap; i++) {
		if (!table[i].id)
			continue;
		uint32_t j = table[i].hash & (ncap - 1);
		while (nt[j].id)
			j = (j + 1) & (ncap - 1);
		nt[j] = table[i];
	}
	free(table);
	table = nt;
	cap = ncap;
	return 0;
}

uint32_t tl_intern(const char *s, size_t n)
{
	uint32_t h, j, id = 0;

	if (!s)
		return 0;
	if (n > MAX_LEN)
		n = MAX_LEN;
	h = hash_bytes(s, n);
	pthread_mutex_lock(&lock);
	if ((count + 1) * 2 > cap && (count >= MAX_STRINGS || grow_locked()))
		goto out;
	for (j = h & (cap - 1); table[j].id; j = (j + 1) & (cap - 1))
		if (table[j].hash == h && same(table[j].id, s, n)) {
			id = table[j].id;
			goto out;
		}
	if (arena_len + 8 + n > arena_cap) {
		size_t ncap = arena_cap ? arena_cap * 2 : 65536;
		while (ncap < arena_len + 8 + n)
			ncap *= 2;
		char *na = ncap <= MAX_BYTES ? realloc(arena, ncap) : NULL;
		if (!na)
			goto out;
		arena = na;
		arena_cap = ncap;
	}
	id = ++count;
	uint32_t len = (uint32_t)n;
	memcpy(arena + arena_len, &id, 4);
	memcpy(arena + arena_len + 4, &len, 4);
	memcpy(arena + arena_len + 8, s, n);
	offset_of[id] = arena_len;
	arena_len += 8 + n;
	table[j].hash = h;
	table[j].id = id;
out:
	pthread_mutex_unlock(&lock);
	return id;
}

uint32_t tl_intern_cstr(const char *s)
{
	return s ? tl_intern(s, strlen(s)) : 0;
}

/* Copies out the entries not sent yet (at most one message's worth). */
size_t tl_strings_take_pending(char **payload)
{
	size_t len = 0;

	*payload = NULL;
	pthread_mutex_lock(&lock);
	if (arena_len > sent_upto) {
		size_t end = sent_upto;
		while (end < arena_len) {  /* whole entries, within the message bound */
			uint32_t l;
			memcpy(&l, arena + end + 4, 4);
			if (end + 8 + l - sent_upto > TL_GPU_MSG_MAX_LEN)
				break;
			end += 8 + l;
		}
		len = end - sent_upto;
		*payload = malloc(len);
		if (*payload) {
			memcpy(*payload, arena + sent_upto, len);
			sent_upto = end;
		} else {
			len = 0;
		}
	}
	pthread_mutex_unlock(&lock);
	return len;
}

void tl_strings_resend_all(void)
{
	pthread_mutex_lock(&lock);
	sent_upto = 0;
	pthread_mutex_unlock(&lock);
}

/* Held across fork() so a child never sees the table half-updated. */
void tl_strings_atfork_prepare(void) { pthread_mutex_lock(&lock); }
void tl_strings_atfork_parent(void) { pthread_mutex_unlock(&lock); }
void tl_strings_atfork_child(void) { pthread_mutex_unlock(&lock); }
