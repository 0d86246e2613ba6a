/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Family pystack (timeline/pystack/family.py, pystack.bpf.c beside this
 * file): Python call stacks of the recorded threads, at CUDA synchronizing
 * calls and where a thread blocks.  Mirrored once by
 * timeline/pystack/records.py; tests/unit/test_layout.py checks the ring's
 * record, tests/system/test_pystack_layouts.py the other structs, against the BTF of
 * pystack.bpf.o.  Included after vmlinux.h (tracking.bpf.h).
 */
#ifndef TIMELINE_PYSTACK_RECORDS_H
#define TIMELINE_PYSTACK_RECORDS_H

#define TL_RING_PYSTACK 10

/* Record kinds of the ring (struct tl_py_event). */
#define TL_PY_CALL   1  /* the stack at a probed call's entry (cookie: the cuda probe id) */
#define TL_PY_WAIT   2  /* the stack a thread blocked in: ts = switch-out, dur = until switch-in */
#define TL_PY_SAMPLE 3  /* a CPU sample (perf_event timer) */

/* tl_py_event.flags and tl_py_stack.flags */
#define TL_PYF_TRUNC    1  /* deeper than TL_PY_MAX_FRAMES: the outermost frames are cut */
#define TL_PYF_NO_STATE 2  /* no PyThreadState for this thread (it never ran Python) */
#define TL_PYF_NO_FRAME 4  /* a thread state, but no Python frame on it */
#define TL_PYF_FAULT    8  /* a read of the interpreter's memory failed mid-walk */
#define TL_PYF_EXEC     16 /* py_stacks: no stack, a recorded process exec'ed (look at its new image) */
#define TL_PYF_HOOKED   32 /* TL_PY_CALL taken after the cuda family's program of the same hit (a
			    * tail call from it): the call's slice starts before this record, or at
			    * its ts exactly (that program handed its entry time over: dur 0) */

#define TL_PY_MAX_FRAMES 64

/* tl_py_call's attach cookie: the cuda family's probe id, and what kind of
 * call it is.  Launches take a stack one in py_settings.launch_every per
 * thread; a driver launch made inside a runtime launch (cudaLaunchKernel ->
 * cuLaunchKernel) is not counted, its runtime call was. */
#define TL_PY_CK_ID_MASK 4095
#define TL_PY_CK_LAUNCH  65536   /* 1 << 16: a kernel or graph launch */
#define TL_PY_CK_DRIVER  131072  /* 1 << 17: a driver-API launch */

/* tl_py_proc.instr_kind: what the frame's instruction field holds. */
#define TL_PY_INSTR_PTR   0  /* a pointer to the code unit (3.11+: prev_instr / instr_ptr) */
#define TL_PY_INSTR_INDEX 1  /* an int index of code units (3.10: f_lasti) */

#define TL_PY_NONE 65535  /* an offset the layout does not have */
#define TL_PY_WINDOW 80   /* bytes read at once from a frame and from a code object */
#define TL_PY_TSWIN 256  /* bytes of a thread state read at once: thread_id, frame, datastack (all versions) */
#define TL_PY_CHUNK 16384 /* bytes of a thread's frame stack (3.11+: data stack chunk) read at once */
#define TL_PY_FREE_STRIPES 64  /* tl_py_proc.frees: counters of freed code objects, by address */
#define TL_PY_FREE_STRIPE(code) (((code) >> 4) & (TL_PY_FREE_STRIPES - 1))

/* One Python frame: the code object, the byte offset of the instruction in
 * its bytecode (0xffffffff: not started), and a checksum of the code
 * object's identity fields (first line, version or name hash, name and
 * file pointers) so a freed and reused address is never taken for the old
 * code object. */
struct tl_py_frame {
	__u64 code;
	__u32 instr;
	__u32 check;
};

/* A distinct stack of a process, sent once (per process and stack id) on
 * the plugin's private ring py_stacks; frames[0] is the innermost. */
struct tl_py_stack {
	__u64 stack_id;
	__u32 tgid;
	__u16 depth;
	__u8 flags;        /* TL_PYF_* */
	__u8 pad;
	struct tl_py_frame frames[TL_PY_MAX_FRAMES];
};

/* Per-process layout (map py_procs, key: tgid), filled by the plugin from
 * the interpreter's version (timeline/pystack/layouts.py).  Offsets in
 * bytes; *_base + a field's offset is where the field is, each window of
 * TL_PY_WINDOW bytes being read at once. */
struct tl_py_proc {
	__u64 runtime;          /* address of _PyRuntime */
	__u16 rt_interp_head;   /* _PyRuntime.interpreters.head */
	__u16 interp_next;
	__u16 interp_threads;   /* PyInterpreterState.threads.head */
	__u16 ts_next;
	__u16 ts_thread_id;     /* PyThreadState.thread_id: pthread_self(), the thread's fs base */
	__u16 ts_frame;         /* tstate -> cframe (3.11, 3.12), current_frame (3.13), frame (3.10) */
	__u16 cframe_frame;     /* cframe -> current_frame; TL_PY_NONE: ts_frame is the frame */
	__u16 fr_base;          /* frame window */
	__u16 fr_code;          /* f_code / f_executable (from fr_base) */
	__u16 fr_previous;      /* previous / f_back */
	__u16 fr_instr;         /* prev_instr / instr_ptr / f_lasti */
	__u16 fr_owner;         /* owner byte; TL_PY_NONE: no such field */
	__u16 co_base;          /* code object window */
	__u16 co_firstlineno;   /* from co_base */
	__u16 co_version;       /* co_version (3.12+); TL_PY_NONE: hash co_name's string instead */
	__u16 co_name;
	__u16 co_filename;
	__u16 co_code;          /* first code unit (co_code_adaptive), from the object's start */
	__u16 str_hash;         /* a str's cached hash, from the object's start */
	__u8 instr_kind;        /* TL_PY_INSTR_* */
	__u8 owner_skip;        /* frames of this owner are C-stack shims: skipped; 255: none */
	__u16 ts_datastack;     /* tstate -> datastack_chunk, datastack_top after it (3.11+); TL_PY_NONE: 3.10 */
	__u16 chunk_data;       /* _PyStackChunk.data */
	__u32 gen;              /* this entry's number: keys of per-image caches (a new image, a new number) */
	__u8 code_cache;        /* code_dealloc is probed: code checksums may be cached */
	__u8 pad;
	__u16 str_length;       /* str objects (PyASCIIObject): length, state bits, */
	__u16 str_state;
	__u16 str_ascii;        /* where a compact ASCII string's data starts, */
	__u16 str_compact;      /* and a compact non-ASCII one's */
	__u8 pad2[2];
	/* Code objects freed since (counted by tl_py_code_free), by stripe of
	 * their address (TL_PY_FREE_STRIPE): a cached checksum stands while its
	 * stripe's count is what it was, so a free retires 1/64th of the cache. */
	__u32 frees[TL_PY_FREE_STRIPES];
	__u32 pad3;
};

/* The ring's record. */
struct tl_py_event {
	__u64 ts;          /* bpf_ktime_get_boot_ns(): call entry, switch-out, sample */
	__u64 dur;         /* TL_PY_WAIT: until the thread ran again; TL_PY_CALL: time taking the stack (0: not timed) */
	__u64 stack_id;    /* 0: no stack (see flags) */
	__u32 tid;
	__u32 tgid;
	__u32 cookie;      /* TL_PY_CALL: the cuda probe id of the function (TL_PY_CK_ID_MASK bits) */
	__u16 cpu;
	__u8 kind;         /* TL_PY_* */
	__u8 flags;        /* TL_PYF_* */
};                     /* 40 bytes */

#endif /* TIMELINE_PYSTACK_RECORDS_H */
