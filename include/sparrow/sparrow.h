/*
 * sparrow: collective communication for Ethernet and WAN; sparse, bit-exact weight broadcast.
 *
 * This header mirrors NCCL's: types and numeric values match ncclDataType_t / ncclResult_t where NCCL
 * has them. It is C99 and C++ compatible. Only symbols starting with `sparrow` are exported.
 *
 * This release provides the library's foundation (errors, versioning). The communicator and the
 * collectives of the design (sparrowCommInitRank, sparrowBroadcast, sparrowSparseBcast, ...) are
 * added to this header as they are implemented; nothing is declared here that does not exist.
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

/* A static, human-readable name of a result code. Any thread; never NULL. */
const char* sparrowGetErrorString(sparrowResult_t result);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPARROW_SPARROW_H_ */
