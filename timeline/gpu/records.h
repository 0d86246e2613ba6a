/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one definition of what the CUPTI/NVTX injection library (family `gpu`)
 * sends to the recorder, and of the records the recorder stores in the raw log
 * under ring id TL_RING_GPU.  Not a BPF ring: the records come from the
 * target's own process over a socket, in whole CUPTI buffers at a time.
 *
 * Wire format (one SOCK_STREAM connection per traced process; the abstract
 * socket name is in the environment variable TIMELINE_GPU_SOCKET): a sequence
 * of messages, each `struct tl_gpu_msg` followed by `len` payload bytes.
 *   TL_GPU_MSG_HELLO   payload: JSON object (UTF-8), status of the library in
 *                      this process: cupti path/version, runtime major, what
 *                      was enabled or why nothing was.
 *   TL_GPU_MSG_RECORDS payload: n * sizeof(struct tl_gpu_record), stored in
 *                      the raw log as-is (ring TL_RING_GPU) after the recorder
 *                      overwrites `pid` with the peer's SO_PEERCRED pid.
 *   TL_GPU_MSG_STRINGS payload: entries {u32 id; u32 len; char text[len]},
 *                      defining string ids of this process (kernel names as
 *                      CUPTI gives them, NVTX messages and domains).
 *   TL_GPU_MSG_STATUS  payload: JSON object: counters at flush/exit (records
 *                      sent, CUPTI dropped records, buffers lost).
 * The recorder treats every byte as hostile: lengths are bounded, unknown
 * types end the connection, a process outside the recorded tree is refused.
 * Timestamps are CLOCK_BOOTTIME nanoseconds (CUPTI timestamp callback), the
 * clock of bpf_ktime_get_boot_ns().
 */
#ifndef TIMELINE_GPU_RECORDS_H
#define TIMELINE_GPU_RECORDS_H

#include <stdint.h>

#define TL_RING_GPU 7

#define TL_GPU_MSG_HELLO   1
#define TL_GPU_MSG_RECORDS 2
#define TL_GPU_MSG_STRINGS 3
#define TL_GPU_MSG_STATUS  4
#define TL_GPU_MSG_MAX_LEN (8u << 20)  /* larger payloads end the connection */

struct tl_gpu_msg {
	uint32_t type;     /* TL_GPU_MSG_* */
	uint32_t len;      /* payload bytes that follow */
};

/* record kinds */
#define TL_GPU_KERNEL 1    /* a kernel ran on the GPU */
#define TL_GPU_MEMCPY 2    /* a copy (incl. peer-to-peer) */
#define TL_GPU_MEMSET 3
#define TL_GPU_API    4    /* a runtime/driver call CUPTI saw: ties correlation id to thread */
#define TL_GPU_NVTX   5    /* an NVTX range on a CPU thread (push/pop or start/end) */
#define TL_GPU_SYNC   6    /* a CUDA synchronization (stream/event/context/device) */

/* flags */
#define TL_GF_DRIVER  1    /* API: driver API (else runtime) */
#define TL_GF_GRAPH   2    /* kernel/copy/memset launched by a CUDA graph */
#define TL_GF_PEER    4    /* memcpy: peer-to-peer (CUPTI MEMCPY2) */
#define TL_GF_OPEN    8    /* NVTX: range still open at flush (end = last flush) */

struct tl_gpu_record {
	uint64_t start;        /* CLOCK_BOOTTIME ns: GPU start, or call/range start */
	uint64_t end;
	uint64_t bytes;        /* memcpy/memset bytes */
	uint64_t graph_node;   /* graph node id (TL_GF_GRAPH) */
	uint32_t correlation;  /* CUPTI correlation id (kernel/copy/memset/API) */
	uint32_t pid;          /* sending process, set by the recorder (SO_PEERCRED) */
	uint32_t tid;          /* API/NVTX/SYNC: OS thread id */
	uint32_t device;
	uint32_t context;
	uint32_t stream;
	uint32_t name;         /* string id: kernel name, NVTX message (0: none) */
	uint32_t domain;       /* NVTX: domain string id;  API: CUPTI callback id (cbid) */
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t registers;    /* per thread */
	uint32_t static_smem;  /* bytes per block */
	uint32_t dynamic_smem;
	uint32_t graph_id;
	uint16_t kind;         /* TL_GPU_* */
	uint16_t flags;        /* TL_GF_* */
	uint8_t copy_kind;     /* memcpy: CUpti_ActivityMemcpyKind (1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP, ...) */
	uint8_t src_kind;      /* memcpy: CUpti_ActivityMemoryKind of source */
	uint8_t dst_kind;
	uint8_t sync_kind;     /* SYNC: CUpti_ActivitySynchronizationType */
	uint32_t value;        /* memset: value;  NVTX: nesting depth;  API: return code;  SYNC: CUDA event id */
	uint32_t src_device;   /* peer memcpy */
	uint32_t dst_device;
	uint32_t pad;
};                         /* 128 bytes */

#endif /* TIMELINE_GPU_RECORDS_H */
