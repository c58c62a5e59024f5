/*
 * sparrow: collective communication for Ethernet and WAN; sparse, bit-exact weight broadcast.
 *
 * This header mirrors NCCL's: types and numeric values match ncclDataType_t / ncclResult_t where NCCL
 * has them. It is C99 and C++ compatible. Only symbols starting with `sparrow` are exported.
 *
 * This release provides the communicator (bootstrap, authenticated transport, probing). The
 * collectives of the design (sparrowBroadcast, sparrowSparseBcast, groups) are added to this header
 * as they are implemented; nothing is declared here that does not exist.
 */
#ifndef SPARROW_SPARROW_H_
#define SPARROW_SPARROW_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPARROW_MAJOR 0
#define SPARROW_MINOR 1
#define SPARROW_PATCH 0
/* Same encoding as NCCL_VERSION_CODE: major*10000 + minor*100 + patch. */
#define SPARROW_VERSION_CODE (SPARROW_MAJOR * 10000 + SPARROW_MINOR * 100 + SPARROW_PATCH)

#define SPARROW_UNIQUE_ID_BYTES 128
typedef struct { char internal[SPARROW_UNIQUE_ID_BYTES]; } sparrowUniqueId;
typedef struct sparrowComm* sparrowComm_t;
struct CUstream_st;
typedef struct CUstream_st* sparrowStream_t; /* == cudaStream_t; NULL for host buffers */

typedef enum {
  sparrowSuccess = 0,
  sparrowUnhandledCudaError = 1,
  sparrowSystemError = 2,
  sparrowInternalError = 3,
  sparrowInvalidArgument = 4,
  sparrowInvalidUsage = 5,
  sparrowRemoteError = 6,
  sparrowInProgress = 7,
  sparrowTimeout = 8,
  sparrowPeerLost = 9,
  sparrowVersionMismatch = 10,
  sparrowCorruptData = 11,
  sparrowAuthError = 12
} sparrowResult_t;

typedef enum {
  sparrowInt8 = 0,
  sparrowUint8 = 1,
  sparrowInt32 = 2,
  sparrowUint32 = 3,
  sparrowInt64 = 4,
  sparrowUint64 = 5,
  sparrowFloat16 = 6,
  sparrowFloat32 = 7,
  sparrowFloat64 = 8,
  sparrowBfloat16 = 9
} sparrowDataType_t;

/* Library version as SPARROW_VERSION_CODE of the loaded library. Any thread. */
sparrowResult_t sparrowGetVersion(int* version);

/* Creates a communicator id: a random 128-bit secret and the address of a rendezvous store that this
 * call starts in the calling process (it serves until every rank has joined). Call it on one rank and
 * pass the id to the others out of band (MPI_Bcast, a file, ...), as with ncclGetUniqueId. The id is a
 * credential: connections prove knowledge of its secret. */
sparrowResult_t sparrowGetUniqueId(sparrowUniqueId* uniqueId);

/* Joins rank `rank` of `nranks` to the communicator named by commId. Collective: blocks until every
 * rank has joined (or SPARROW_TIMEOUT_S passes: sparrowTimeout), then probes link bandwidth and RTT
 * within SPARROW_PROBE_MS. One communicator is used by one thread at a time; several may live in one
 * process. */
sparrowResult_t sparrowCommInitRank(sparrowComm_t* comm, int nranks, sparrowUniqueId commId, int rank);

/* Frees the communicator and closes its connections. Not collective. */
sparrowResult_t sparrowCommDestroy(sparrowComm_t comm);

/* Fails every pending and future operation of the communicator (they return an error instead of
 * waiting), closes its connections and frees it. May be called from another thread to unblock one
 * that waits. */
sparrowResult_t sparrowCommAbort(sparrowComm_t comm);

sparrowResult_t sparrowCommCount(const sparrowComm_t comm, int* count);
sparrowResult_t sparrowCommUserRank(const sparrowComm_t comm, int* rank);

/* The first asynchronous error the communicator met (a lost peer, a timeout, an abort), or
 * sparrowSuccess. */
sparrowResult_t sparrowCommGetAsyncError(sparrowComm_t comm, sparrowResult_t* asyncError);

/* A static, human-readable name of a result code. Any thread; never NULL. */
const char* sparrowGetErrorString(sparrowResult_t result);

/* The message of the last error on this communicator (or, with comm == NULL, of the last failed call
 * on this thread), naming the peer rank and address where one was involved. Valid until the next
 * call on the same thread; never NULL. */
const char* sparrowGetLastError(sparrowComm_t comm);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPARROW_SPARROW_H_ */
