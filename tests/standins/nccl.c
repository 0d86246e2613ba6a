/*
 * STAND-IN for NCCL (libnccl.so.2), for tests only: the real collective
 * signatures (7 and 8 arguments, the stream on the stack; ncclUniqueId passed
 * by value in memory), with nccl* as weak aliases of pnccl* like NCCL's own
 * library.  No communication happens; calls return ncclSuccess.
 */
#include <stddef.h>
#include <unistd.h>

/* An all-reduce of this many elements never returns, like a collective
 * whose peer died (for the --hang-timeout tests). */
#define STANDIN_HANG_COUNT 0x4841ULL

typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
volatile unsigned long long standin_sink;

int pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	*comm = (ncclComm_t)(0xc0330000ULL + (unsigned long long)rank * 0x10 + (unsigned char)commId.internal[0]);
	return nranks > rank ? 0 : 4; /* ncclInvalidArgument */
}

int pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
		   ncclComm_t comm, void *stream)
{
	while (count == STANDIN_HANG_COUNT)
		pause();
	standin_sink = (unsigned long long)sendbuff + (unsigned long long)recvbuff + count + datatype + op +
		       (unsigned long long)comm + (unsigned long long)stream;
	return 0;
}

int pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, int datatype, ncclComm_t comm,
		   void *stream)
{
	standin_sink = (unsigned long long)sendbuff + (unsigned long long)recvbuff + sendcount + datatype +
		       (unsigned long long)comm + (unsigned long long)stream;
	return 0;
}

int pncclReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op, int root,
		ncclComm_t comm, void *stream)
{
	standin_sink = (unsigned long long)sendbuff + (unsigned long long)recvbuff + count + datatype + op + root +
		       (unsigned long long)comm + (unsigned long long)stream;
	return 0;
}

int pncclSend(const void *sendbuff, size_t count, int datatype, int peer, ncclComm_t comm, void *stream)
{
	standin_sink = (unsigned long long)sendbuff + count + datatype + peer + (unsigned long long)comm +
		       (unsigned long long)stream;
	return 0;
}

int pncclGroupStart(void) { return 0; }
int pncclGroupEnd(void) { return 0; }

int ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int) __attribute__((weak, alias("pncclCommInitRank")));
int ncclAllReduce(const void *, void *, size_t, int, int, ncclComm_t, void *)
	__attribute__((weak, alias("pncclAllReduce")));
int ncclAllGather(const void *, void *, size_t, int, ncclComm_t, void *) __attribute__((weak, alias("pncclAllGather")));
int ncclReduce(const void *, void *, size_t, int, int, int, ncclComm_t, void *)
	__attribute__((weak, alias("pncclReduce")));
int ncclSend(const void *, size_t, int, int, ncclComm_t, void *) __attribute__((weak, alias("pncclSend")));
int ncclGroupStart(void) __attribute__((weak, alias("pncclGroupStart")));
int ncclGroupEnd(void) __attribute__((weak, alias("pncclGroupEnd")));
