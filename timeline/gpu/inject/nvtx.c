// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * NVTX v3 injection: NVTX_INJECTION64_PATH pointing at this library makes the
 * NVTX loader (header-only nvtx3, or libnvToolsExt) call
 * InitializeInjectionNvtx2, which fills NVTX's function tables with ours.
 * A range becomes one TL_GPU_NVTX record on the calling thread when it ends.
 * Cheap by design: a per-thread stack and a per-thread batch sent whole
 * (full, or older than BATCH_AGE_NS at the next range end), no lock shared
 * between threads on the push/pop path except the string table's.
 */
#define _GNU_SOURCE
#define NVTX_NO_IMPL
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>
#include <unistd.h>
#include <nvtx3/nvToolsExt.h>
#include "inject.h"

#define STACK_MAX 128
#define BATCH_N 256
#define BATCH_AGE_NS 200000000ull
#define SPANS 4096               /* open start/end ranges tracked at once */

int tl_nvtx_active;

struct frame { uint64_t start; uint32_t name, domain; };
struct tstate {
	pthread_mutex_t m;       /* taken by the owner per range end, by flush_all at exit */
	pid_t pid;
	uint32_t tid;
	int depth;
	struct frame stack[STACK_MAX];
	int n;
	uint64_t first;
	struct tl_gpu_record batch[BATCH_N];
	struct tstate *next;
};

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tstate *threads;
static pthread_key_t exit_key;
static __thread struct tstate *self;

struct span { uint64_t id, start; uint32_t name, domain, tid; };
static pthread_mutex_t span_lock = PTHREAD_MUTEX_INITIALIZER;
static struct span spans[SPANS];
static uint64_t next_span = 1;

static void send_batch_locked(struct tstate *t)
{
	if (t->n) {
		tl_channel_send_records(t->batch, t->n);
		__atomic_add_fetch(&tl_count.nvtx_records, t->n, __ATOMIC_RELAXED);
	}
	t->n = 0;
}

static void thread_exit(void *p)
{
	struct tstate *t = p, **pp;

	pthread_mutex_lock(&list_lock);
	for (pp = &threads; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	pthread_mutex_unlock(&list_lock);
	pthread_mutex_lock(&t->m);
	send_batch_locked(t);  /* ranges still open on an ended thread are dropped */
	pthread_mutex_unlock(&t->m);
	free(t);
}

static struct tstate *me(void)
{
	struct tstate *t = self;

	if (t && t->pid == tl_getpid())
		return t;
	if (t) {  /* inherited from the parent across fork: its records are the parent's */
		t->pid = tl_getpid();
		t->tid = tl_gettid();
		t->n = 0;
		t->depth = 0;
		return t;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	pthread_mutex_init(&t->m, NULL);
	t->pid = tl_getpid();
	t->tid = tl_gettid();
	pthread_mutex_lock(&list_lock);
	t->next = threads;
	threads = t;
	pthread_mutex_unlock(&list_lock);
	pthread_setspecific(exit_key, t);
	self = t;
	return t;
}

static void emit(struct tstate *t, uint64_t start, uint64_t end, uint32_t name, uint32_t domain, uint32_t tid,
		 uint32_t depth, uint16_t flags)
{
	struct tl_gpu_record *r;

	pthread_mutex_lock(&t->m);
	if (!t->n)
		t->first = end;
	r = &t->batch[t->n++];
	memset(r, 0, sizeof(*r));
	r->kind = TL_GPU_NVTX;
	r->flags = flags;
	r->start = start;
	r->end = end;
	r->tid = tid;
	r->name = name;
	r->domain = domain;
	r->value = depth;
	if (t->n == BATCH_N || end - t->first > BATCH_AGE_NS)
		send_batch_locked(t);
	pthread_mutex_unlock(&t->m);
}

static uint32_t intern_wide(const wchar_t *w)
{
	char buf[4096];
	size_t o = 0;

	for (; w && *w && o + 4 < sizeof(buf); w++) {  /* UTF-32 -> UTF-8 */
		uint32_t c = (uint32_t)*w;
		if (c < 0x80) {
			buf[o++] = (char)c;
		} else if (c < 0x800) {
			buf[o++] = (char)(0xc0 | c >> 6);
			buf[o++] = (char)(0x80 | (c & 0x3f));
		} else if (c < 0x10000) {
			buf[o++] = (char)(0xe0 | c >> 12);
			buf[o++] = (char)(0x80 | (c >> 6 & 0x3f));
			buf[o++] = (char)(0x80 | (c & 0x3f));
		} else if (c < 0x110000) {
			buf[o++] = (char)(0xf0 | c >> 18);
			buf[o++] = (char)(0x80 | (c >> 12 & 0x3f));
			buf[o++] = (char)(0x80 | (c >> 6 & 0x3f));
			buf[o++] = (char)(0x80 | (c & 0x3f));
		}
	}
	return tl_intern(buf, o);
}

static uint32_t message_id(const nvtxEventAttributes_t *a)
{
	if (!a || a->size < offsetof(nvtxEventAttributes_t, message) + sizeof(a->message))
		return 0;
	switch (a->messageType) {
	case NVTX_MESSAGE_TYPE_ASCII:
		return tl_intern_cstr(a->message.ascii);
	case NVTX_MESSAGE_TYPE_UNICODE:
		return intern_wide(a->message.unicode);
	case NVTX_MESSAGE_TYPE_REGISTERED:  /* our handles are string ids */
		return (uint32_t)(uintptr_t)a->message.registered;
	default:
		return 0;
	}
}

static uint32_t domain_id(nvtxDomainHandle_t d) { return (uint32_t)(uintptr_t)d; }

/* push/pop: per-thread stack; a pop ends the innermost range of its domain */
static int push(uint32_t name, uint32_t domain)
{
	struct tstate *t = me();
	if (!t)
		return -1;
	if (t->depth < STACK_MAX)
		t->stack[t->depth] = (struct frame){ tl_now(), name, domain };
	return t->depth++;
}

static int pop(uint32_t domain)
{
	struct tstate *t = me();
	uint64_t now = tl_now();
	int i;

	if (!t || t->depth <= 0)
		return -1;
	if (t->depth > STACK_MAX)  /* the range ending was pushed past the stack: unrecorded */
		return --t->depth;
	for (i = t->depth - 1; i >= 0; i--)
		if (t->stack[i].domain == domain)
			break;
	if (i < 0)
		return -1;
	emit(t, t->stack[i].start, now, t->stack[i].name, domain, t->tid, (uint32_t)i, 0);
	memmove(&t->stack[i], &t->stack[i + 1], (size_t)(t->depth - 1 - i) * sizeof(struct frame));
	return --t->depth;
}

static int push_a(const char *m) { return push(tl_intern_cstr(m), 0); }
static int push_w(const wchar_t *m) { return push(intern_wide(m), 0); }
static int push_ex(const nvtxEventAttributes_t *a) { return push(message_id(a), 0); }
static int pop0(void) { return pop(0); }
static int dpush_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { return push(message_id(a), domain_id(d)); }
static int dpop(nvtxDomainHandle_t d) { return pop(domain_id(d)); }

/* start/end: may end on another thread; kept in a small table by id */
static nvtxRangeId_t start(uint32_t name, uint32_t domain)
{
	uint64_t id, now = tl_now();
	uint32_t tid = tl_gettid();

	me();
	pthread_mutex_lock(&span_lock);
	id = next_span++;
	struct span *s = &spans[id % SPANS];
	if (!s->id)  /* else the table is full of unended ranges: this one goes unrecorded */
		*s = (struct span){ id, now, name, domain, tid };
	pthread_mutex_unlock(&span_lock);
	return id;
}

static void end(nvtxRangeId_t id)
{
	struct tstate *t = me();
	struct span s = { 0 };
	uint64_t now = tl_now();

	pthread_mutex_lock(&span_lock);
	if (id && spans[id % SPANS].id == id) {
		s = spans[id % SPANS];
		spans[id % SPANS].id = 0;
	}
	pthread_mutex_unlock(&span_lock);
	if (s.id && t)
		emit(t, s.start, now, s.name, s.domain, s.tid, 0, 0);
}

static nvtxRangeId_t start_a(const char *m) { return start(tl_intern_cstr(m), 0); }
static nvtxRangeId_t start_w(const wchar_t *m) { return start(intern_wide(m), 0); }
static nvtxRangeId_t start_ex(const nvtxEventAttributes_t *a) { return start(message_id(a), 0); }
static nvtxRangeId_t dstart_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
	return start(message_id(a), domain_id(d));
}
static void dend(nvtxDomainHandle_t d, nvtxRangeId_t id) { (void)d; end(id); }

static nvtxDomainHandle_t domain_create_a(const char *name)
{
	return (nvtxDomainHandle_t)(uintptr_t)tl_intern_cstr(name);
}
static nvtxDomainHandle_t domain_create_w(const wchar_t *name) { return (nvtxDomainHandle_t)(uintptr_t)intern_wide(name); }
static nvtxStringHandle_t register_a(nvtxDomainHandle_t d, const char *s)
{
	(void)d;
	return (nvtxStringHandle_t)(uintptr_t)tl_intern_cstr(s);
}
static nvtxStringHandle_t register_w(nvtxDomainHandle_t d, const wchar_t *s)
{
	(void)d;
	return (nvtxStringHandle_t)(uintptr_t)intern_wide(s);
}
static void domain_destroy(nvtxDomainHandle_t d) { (void)d; }

/* Every thread's batch; at exit also ranges still open (TL_GF_OPEN, end = now). */
void tl_nvtx_flush_all(int at_exit)
{
	uint64_t now = tl_now();
	struct tstate *t;

	if (!tl_nvtx_active)
		return;
	pthread_mutex_lock(&list_lock);
	for (t = threads; t; t = t->next) {
		if (t->pid != tl_getpid())
			continue;
		if (at_exit)
			for (int i = 0; i < t->depth && i < STACK_MAX; i++)
				emit(t, t->stack[i].start, now, t->stack[i].name, t->stack[i].domain, t->tid,
				     (uint32_t)i, TL_GF_OPEN);
		pthread_mutex_lock(&t->m);
		send_batch_locked(t);
		pthread_mutex_unlock(&t->m);
	}
	pthread_mutex_unlock(&list_lock);
}

void tl_nvtx_atfork_child(void)
{
	/* Other threads do not exist in the child; their states are the parent's. */
	pthread_mutex_init(&list_lock, NULL);
	pthread_mutex_init(&span_lock, NULL);
	threads = NULL;
	memset(spans, 0, sizeof(spans));
	if (self) {
		pthread_mutex_init(&self->m, NULL);
		self->next = NULL;
		threads = self;
		self->n = 0;
		self->depth = 0;
		self->pid = tl_getpid();
		self->tid = tl_gettid();
	}
}

#define SET(table, size, id, fn)                                  \
	do {                                                      \
		if ((size) > (unsigned)(id) && (table)[id])        \
			*(table)[id] = (NvtxFunctionPointer)(fn); \
	} while (0)

TL_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table)
{
	const NvtxExportTableCallbacks *cb;
	NvtxFunctionTable core = NULL, core2 = NULL;
	unsigned int ncore = 0, ncore2 = 0;

	/* 0: NVTX calls stay no-ops, the cheapest outcome when nobody records */
	if (!tl_channel_enabled() || !get_export_table)
		return 0;
	cb = get_export_table(NVTX_ETID_CALLBACKS);
	if (!cb || cb->struct_size < sizeof(*cb) || !cb->GetModuleFunctionTable)
		return 0;
	if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &ncore) || !core)
		return 0;
	if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &ncore2))
		core2 = NULL;
	pthread_key_create(&exit_key, thread_exit);
	SET(core, ncore, NVTX_CBID_CORE_RangePushA, push_a);
	SET(core, ncore, NVTX_CBID_CORE_RangePushW, push_w);
	SET(core, ncore, NVTX_CBID_CORE_RangePushEx, push_ex);
	SET(core, ncore, NVTX_CBID_CORE_RangePop, pop0);
	SET(core, ncore, NVTX_CBID_CORE_RangeStartA, start_a);
	SET(core, ncore, NVTX_CBID_CORE_RangeStartW, start_w);
	SET(core, ncore, NVTX_CBID_CORE_RangeStartEx, start_ex);
	SET(core, ncore, NVTX_CBID_CORE_RangeEnd, end);
	if (core2) {
		SET(core2, ncore2, NVTX_CBID_CORE2_DomainRangePushEx, dpush_ex);
		SET(core2, ncore2, NVTX_CBID_CORE2_DomainRangePop, dpop);
		SET(core2, ncore2, NVTX_CBID_CORE2_DomainRangeStartEx, dstart_ex);
		SET(core2, ncore2, NVTX_CBID_CORE2_DomainRangeEnd, dend);
		SET(core2, ncore2, NVTX_CBID_CORE2_DomainCreateA, domain_create_a);
		SET(core2, ncore2, NVTX_CBID_CORE2_DomainCreateW, domain_create_w);
		SET(core2, ncore2, NVTX_CBID_CORE2_DomainRegisterStringA, register_a);
		SET(core2, ncore2, NVTX_CBID_CORE2_DomainRegisterStringW, register_w);
		SET(core2, ncore2, NVTX_CBID_CORE2_DomainDestroy, domain_destroy);
	}
	tl_nvtx_active = 1;
	tl_process_setup();
	tl_channel_hello();
	return 1;
}
