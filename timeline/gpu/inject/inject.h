/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Internal interface of timeline's CUPTI/NVTX injection library
 * (libtimeline_inject.so).  The wire format is ../records.h.
 * Rule for every file here: never harm the target.  Any failure leaves the
 * library inert and is explained in the HELLO/STATUS message.
 */
#ifndef TL_INJECT_H
#define TL_INJECT_H

#include <stddef.h>
#include <stdint.h>
#include "../records.h"

#define TL_EXPORT __attribute__((visibility("default")))

/* inject.c: process-wide state */
uint64_t tl_now(void);               /* CLOCK_BOOTTIME ns */
uint32_t tl_gettid(void);
#include <sys/types.h>
pid_t tl_getpid(void);               /* cached; renewed after fork */
void tl_status_note(const char *key, const char *value);  /* reason/notes for HELLO */
extern char tl_hello_extra[2048];     /* JSON members (",\"k\":v...") added to HELLO */

/* channel.c: one connection per process, messages per records.h */
int tl_channel_enabled(void);        /* TIMELINE_GPU_SOCKET set and not given up */
int tl_channel_send(uint32_t type, const void *payload, size_t len);  /* 0 ok, -1 lost */
int tl_channel_send_records(const struct tl_gpu_record *r, size_t n);
void tl_channel_atfork_child(void);
int tl_channel_connected(void);      /* this process has its own connection */
void tl_channel_hello(void);         /* (re)send HELLO: state changed */
void tl_process_setup(void);         /* atexit + atfork, once */
struct tl_counters {
	uint64_t records_sent, records_lost, buffers_lost, messages_sent, reconnects;
	uint64_t cupti_dropped, cupti_buffers, nvtx_records;
};
extern struct tl_counters tl_count;
void tl_channel_send_status(const char *when);

/* strings.c: process string table; ids are 1.., 0 is "none" */
uint32_t tl_intern(const char *s, size_t len);
uint32_t tl_intern_cstr(const char *s);
/* Appends STRINGS entries not yet sent on this connection; call with the channel lock held. */
int tl_strings_flush_locked(int fd);
void tl_strings_resend_all(void);    /* new connection: every string again */

/* cupti_loader.c */
struct tl_cupti;                     /* function table, see cupti_loader.c */
const char *tl_cupti_load(char *path_out, size_t path_len, int *major_out);

/* activity.c */
const char *tl_activity_start(void); /* NULL ok, else why nothing is enabled */
void tl_activity_flush(int force);
uint64_t tl_activity_dropped(void);

/* decode_v12.c / decode_v13.c (one source compiled per header set): one
 * CUPTI activity record -> tl record; returns 1 if converted, 0 if skipped. */
typedef uint32_t (*tl_intern_fn)(const char *);
int tl_decode_v12(const void *activity, struct tl_gpu_record *out, tl_intern_fn intern);
int tl_decode_v13(const void *activity, struct tl_gpu_record *out, tl_intern_fn intern);

/* nvtx.c */
void tl_nvtx_flush_all(int at_exit);

/* json helpers (inject.c) */
size_t tl_json_str(char *out, size_t cap, const char *s);  /* quoted, escaped */

#endif
