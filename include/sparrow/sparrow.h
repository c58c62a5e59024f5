/*
 * sparrow: collective communication for Ethernet and WAN; sparse, bit-exact weight broadcast.
 *
 * This header mirrors NCCL's: types and numeric values match ncclDataType_t / ncclResult_t where NCCL
 * has them. It is C99 and C++ compatible. Only symbols starting with `sparrow` are exported.
 *
 * Buffers are host memory, or CUDA device memory when libsparrow_cuda.so (built with nvcc) is found
 * next to libsparrow and a GPU is present. For device buffers the call is stream-ordered: it starts
 * after the work already queued on `stream` and the data is in place when it returns, so work queued
 * later on the stream sees it. A non-NULL stream without device support is sparrowInvalidArgument.
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

/* A key derived from a shared secret file, for a rendezvous outside sparrow that must authenticate
 * its peers (the Python module's id exchange uses it): HMAC-SHA256 keyed by `label` (a NUL-terminated
 * string naming the purpose, 1..256 bytes) of the file's contents, trailing whitespace dropped. The
 * file gets the checks SPARROW_SECRET_FILE gets: a regular file (not a link), no access for group or
 * others, 16 bytes to 64 KiB; otherwise sparrowInvalidUsage and sparrowGetLastError(NULL) says why.
 * path NULL or empty: SPARROW_SECRET_FILE (sparrowInvalidUsage when that is not set). Any thread. */
sparrowResult_t sparrowSecretFileKey(const char* path, const char* label, unsigned char key[32]);

/* Joins rank `rank` of `nranks` to the communicator named by commId. Collective: blocks until every
 * rank has joined (or SPARROW_TIMEOUT_S passes: sparrowTimeout), then probes link bandwidth and RTT
 * within SPARROW_PROBE_MS. One communicator is used by one thread at a time; several may live in one
 * process. */
sparrowResult_t sparrowCommInitRank(sparrowComm_t* comm, int nranks, sparrowUniqueId commId, int rank);

/* Communicator options (NCCL-style: start from SPARROW_CONFIG_INITIALIZER, then set fields). */
typedef struct sparrowConfig_v1 {
  size_t size;          /* filled by SPARROW_CONFIG_INITIALIZER */
  unsigned int magic;   /* filled by SPARROW_CONFIG_INITIALIZER */
  unsigned int version; /* filled by SPARROW_CONFIG_INITIALIZER */
  int elastic;          /* 1: members may die or stall and are dropped; broadcasts (sparse and dense)
                           complete for the live members. 0: today's fixed communicator. */
  int leaseMs;          /* elastic only; 0 = SPARROW_LEASE_MS (10000), else 100..86400000: a member silent
                           this long during an operation is dropped */
  const char* region;   /* NULL = SPARROW_REGION or inferred from RTTs; else this rank's region label */
} sparrowConfig_t;
#define SPARROW_CONFIG_INITIALIZER { sizeof(sparrowConfig_t), 0x53505243u /* "SPRC" */, 1, 0, 0, NULL }

/* sparrowCommInitRank with options; config NULL is sparrowCommInitRank. Every rank must pass the same
 * elastic and leaseMs (else every rank fails with sparrowInvalidUsage naming both). A config not
 * made from SPARROW_CONFIG_INITIALIZER, or a field out of range, is sparrowInvalidArgument.
 *
 * Elastic communicators (the root of the broadcasts is the one rank that cannot be replaced):
 *  - a receiver or relay that dies, or is silent past the lease during an operation, is dropped; the
 *    root's and every other member's sparrowSparseBcast return sparrowSuccess with bit-exact data,
 *    and the drop is logged (INFO) and visible in sparrowCommGetMembers and the stats JSON;
 *  - the children of a dead relay re-attach (first to a rank of their region above it, which serves
 *    them while it receives the operation and, sparse, after its call returned as well;
 *    else to the root) and take the rest of the same operation from
 *    the part they were waiting for (nothing they already hold is sent again);
 *  - later operations run along a tree over the live members only;
 *  - a dropped rank that is still running gets sparrowPeerLost from its next call (it is not a member
 *    any more; a new process may take its slot with sparrowCommJoin); if the root dies, every
 *    receiver returns sparrowPeerLost, its buffer unchanged;
 *  - the root waits for every member's acknowledgement before it returns (at most the lease after its
 *    last part), so its call reflects who is still in;
 *  - sparrowBroadcast (dense) works the same way over the live members: a group is one operation,
 *    the children of a dead relay take the rest of it from the root, a silent member is dropped, and
 *    every receive buffer is written only once the whole broadcast arrived and every member agreed
 *    (a failed call leaves it as it was; this costs one host copy of the data per receiver). */
sparrowResult_t sparrowCommInitRankConfig(sparrowComm_t* comm, int nranks, sparrowUniqueId commId, int rank,
                                          sparrowConfig_t* config);

/* A process joins a running elastic communicator into slot *rank (in: the slot, 1..count-1, that a
 * dropped member held, e.g. the rank a restarted worker had, or a vacant one, or -1: any free slot,
 * which the store hands out to one joiner at a time, the lowest first; out: the slot taken). A
 * communicator grows past its nranks only when its ranks were created with SPARROW_MAX_RANKS set
 * (the number of slots; the ones past nranks start vacant, and sparrowCommCount counts every slot). It looks the
 * communicator up at its rendezvous store (which, for an elastic communicator, serves for as long as
 * the process that called sparrowGetUniqueId runs), asks rank 0, and returns once rank 0 admitted it,
 * at rank 0's next sparrowSparseBcast or sparrowBroadcast (so rank 0 must be the root). Make the same
 * call right after: the joiner takes part from that operation on. A sparse one brings it a full
 * snapshot of every buffer set (later ones deltas); a dense one is whole anyway. The root's lease
 * applies to it. A restarted worker whose receive
 * buffers still hold a version the root retained (SPARROW_RETAIN_STEPS) gets the deltas since that
 * version instead of a snapshot: it tells the root its buffers' content digests, and the deltas are
 * applied only if the buffers hold that version bit for bit. config: NULL or elastic = 1
 * (leaseMs 0 or the communicator's). Errors: sparrowInvalidUsage (not elastic, a lease that differs),
 * sparrowInvalidArgument (bad slot), sparrowPeerLost (the slot is still held by a live member, or
 * rank 0 unreachable), sparrowTimeout (rank 0 made no broadcast within SPARROW_TIMEOUT_S).
 * With -1, sparrowInvalidUsage also when no slot freed within twice the lease (every rank is a live
 * member), and rank 0 must run in a process that can reach the store. Do not mix a named slot and
 * -1 for the same slot: two processes would compete for it. */
sparrowResult_t sparrowCommJoin(sparrowComm_t* comm, sparrowUniqueId commId, sparrowConfig_t* config, int* rank);

/* The live members as this rank last saw them (the root: at the end of its last operation; others:
 * from the last operation's header), increasing, into ranks[0..maxRanks); *nlive = their number (may
 * exceed maxRanks; ranks may be NULL when maxRanks is 0). A fixed communicator lists every rank. */
sparrowResult_t sparrowCommGetMembers(sparrowComm_t comm, int* ranks, int maxRanks, int* nlive);

/* Frees the communicator and closes its connections. Not collective; first waits (up to
 * SPARROW_TIMEOUT_S) until the broadcasts this rank rooted were acknowledged, so data a root handed
 * to the transport still arrives. */
sparrowResult_t sparrowCommDestroy(sparrowComm_t comm);

/* Fails every pending and future operation of the communicator (they return an error instead of
 * waiting), closes its connections and frees it. May be called from another thread to unblock one
 * that waits. */
sparrowResult_t sparrowCommAbort(sparrowComm_t comm);
/* After either, the handle is dead: every call with it (a second destroy included) returns
 * sparrowInvalidUsage instead of touching freed memory. */

/* The number of ranks (every rank is in 0..count-1); for an elastic communicator created with
 * SPARROW_MAX_RANKS, the number of slots, vacant ones included (sparrowCommGetMembers: who is in). */
sparrowResult_t sparrowCommCount(const sparrowComm_t comm, int* count);
sparrowResult_t sparrowCommUserRank(const sparrowComm_t comm, int* rank);

/* The first asynchronous error the communicator met (a lost peer, a timeout, an abort), or
 * sparrowSuccess. */
sparrowResult_t sparrowCommGetAsyncError(sparrowComm_t comm, sparrowResult_t* asyncError);

/* A static, human-readable name of a result code. Any thread; never NULL. */
const char* sparrowGetErrorString(sparrowResult_t result);

/* The value of setting SPARROW_<name> (name without the prefix, e.g. "TIMEOUT_S") as the library
 * resolves it (override, environment, config file, default), in canonical form: an integer in
 * decimal with any K/M/G suffix applied, a boolean as "0" or "1", a string as given; NUL-terminated
 * into value (len bytes; *needed, if not NULL, gets the size required). value NULL with len 0 asks
 * for the size only. Errors: sparrowInvalidArgument for an unknown name, a configured value the
 * library rejects (the message says why) or a buffer too small. Any thread. */
sparrowResult_t sparrowGetSetting(const char* name, char* value, size_t len, size_t* needed);

/* Whether a failing call also writes its message to stderr as a WARN line (1, the default) or only
 * returns it (0: sparrowGetLastError still has it). Language bindings that raise the message as an
 * exception set 0, so that each error is reported once. Process-wide; any thread. */
sparrowResult_t sparrowSetErrorEcho(int echo);

/* The message of the last error on this communicator (or, with comm == NULL, of the last failed call
 * on this thread), naming the peer rank and address where one was involved. Valid until the next
 * call on the same thread; never NULL. */
const char* sparrowGetLastError(sparrowComm_t comm);

/* Dense broadcast of `count` elements from the root's sendbuff into every rank's recvbuff (the
 * root's too when recvbuff != sendbuff), pipelined in segments along the topology-aware tree.
 * Collective; returns when this rank's buffers may be reused. */
sparrowResult_t sparrowBroadcast(const void* sendbuff, void* recvbuff, size_t count, sparrowDataType_t datatype,
                                 int root, sparrowComm_t comm, sparrowStream_t stream);
/* In-place form: sparrowBroadcast(buff, buff, ...). */
sparrowResult_t sparrowBcast(void* buff, size_t count, sparrowDataType_t datatype, int root, sparrowComm_t comm,
                             sparrowStream_t stream);

/* Sparse, bit-exact broadcast of a buffer that changes a little between calls (RL weight sync).
 * Collective: every rank passes the same count, datatype and root. Per-buffer state is keyed by the
 * buffer address (root: sendbuff; others: recvbuff). The first call for a buffer sends it whole;
 * later calls send only the elements whose bits changed since the last call, and receivers, whose
 * recvbuff must still hold the previous version, apply them after verifying every chunk and the
 * content digest. Before writing, a receiver checks that recvbuff still holds the previous version
 * bit for bit (SPARROW_VERIFY_BASE, on by default; overlapped with the transfer). A receiver's buffer
 * holds the old version or the new one, never a mixture, and sparrowSuccess is never returned unless
 * it holds the root's new version.
 * Returns: on the root, once the data is handed to the transport (the caller may modify sendbuff at
 * once); on receivers, once the new version is in recvbuff. Errors:
 *   sparrowInvalidUsage     arguments differ between ranks (on the first call for a buffer every rank
 *                           returns it; later, receivers return it and the root at its next call)
 *   sparrowVersionMismatch  this receiver's buffer did not hold the previous version (the user wrote
 *                           into it, or a lost step): recvbuff is unchanged and the next call on it
 *                           delivers a full snapshot to this rank automatically
 *   sparrowPeerLost, sparrowTimeout, sparrowCorruptData: as named; recvbuff unchanged. */
sparrowResult_t sparrowSparseBcast(const void* sendbuff, void* recvbuff, size_t count, sparrowDataType_t datatype,
                                   int root, sparrowComm_t comm, sparrowStream_t stream);
/* Staging: receive while generating, switch at a safe point (vLLM-style start/update/finish).
 * sparrowSparseBcastStage takes sparrowSparseBcast's arguments. On a receiver it returns at once: a
 * background thread receives the step (forwarding it to this rank's children, if any), verifies it
 * (including that recvbuff still holds the previous version) and decodes it into staging memory
 * proportional to the changes. recvbuff is only read until the commit: the caller keeps reading it
 * (generating with the previous version) and must not write it. On the root it is
 * sparrowSparseBcast. Inside a group, the group's staged calls are one staged step.
 * sparrowStageQuery sets *ready to 1 once everything staged has been received and verified (or has
 * failed), else 0; non-blocking; 1 when nothing is staged.
 * sparrowStageCommit waits until ready, then writes the staged changes into recvbuff (time
 * proportional to the changes) and returns the step's result (any error sparrowSparseBcast would
 * return; recvbuff is then unchanged). Success when nothing is staged.
 * One staged step per communicator at a time: any other collective on the communicator before the
 * commit returns sparrowInvalidUsage. Waits are bounded by SPARROW_TIMEOUT_S; sparrowCommAbort
 * stops a staged step; sparrowCommDestroy lets it arrive and drops it. Same thread rules as the
 * other calls (one thread at a time per communicator). */
sparrowResult_t sparrowSparseBcastStage(const void* sendbuff, void* recvbuff, size_t count, sparrowDataType_t datatype,
                                        int root, sparrowComm_t comm, sparrowStream_t stream);
sparrowResult_t sparrowStageQuery(sparrowComm_t comm, int* ready);
sparrowResult_t sparrowStageCommit(sparrowComm_t comm);

/* Forgets the state of `buff` on this rank: its next sparse broadcast is dense (root) or a resync. */
sparrowResult_t sparrowSparseBcastReset(sparrowComm_t comm, const void* buff);

/* Calls between these travel as one operation: the sparse broadcasts of one communicator and root
 * become one checkpoint (one version step for a whole model's tensors), and the dense broadcasts of
 * one communicator and root send all their data before one round of acknowledgements (a group of N
 * costs one round trip, not N). Per thread; may nest. */
sparrowResult_t sparrowGroupStart(void);
sparrowResult_t sparrowGroupEnd(void);

/* What the last collective on this communicator did, as seen by this rank. Versioned like
 * sparrowConfig_t: start from SPARROW_STATS_INITIALIZER (the size and version the caller was built
 * with); later versions add fields at the end, and the library writes only the fields the caller's
 * size holds. */
#define SPARROW_STATS_VERSION 1
typedef struct sparrowStats_v1 {
  size_t size;                         /* sizeof(sparrowStats): filled by SPARROW_STATS_INITIALIZER */
  unsigned int version;                /* SPARROW_STATS_VERSION: filled by SPARROW_STATS_INITIALIZER */
  unsigned long long ops;              /* collectives completed on this communicator */
  unsigned long long denseBytes;       /* bytes of the buffers of the last operation */
  unsigned long long wireBytes;        /* bytes of its checkpoint (or dense payload) */
  unsigned long long changedElements;  /* elements whose bits changed */
  double density;                      /* changedElements / elements */
  double encodeSeconds;                /* root: extraction + encoding (overlapped with sending) */
  double applySeconds;                 /* receiver: verification + apply */
  double totalSeconds;                 /* the whole call on this rank */
  unsigned long long resyncs;          /* full snapshots sent (root) or received (receiver), cumulative */
  int full;                            /* the last operation was a full (dense) version */
  int stagePending;                    /* a staged step awaits sparrowStageCommit */
  int stageReady;                      /* ... and has been received and verified (or failed) */
  unsigned long long stageBytesReceived; /* checkpoint bytes of the staged step received so far */
  unsigned long long stagedBytes;      /* memory holding its staged changes (once ready) */
  unsigned long long catchUps;         /* resyncs by the deltas a rank missed instead of a snapshot, cumulative */
  unsigned long long catchUpBytes;     /* bytes of those catch-ups, cumulative */
} sparrowStats;
#define SPARROW_STATS_INITIALIZER \
  { sizeof(sparrowStats), SPARROW_STATS_VERSION, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0, 0, 0, 0, 0 }
/* sparrowInvalidArgument when stats was not made from SPARROW_STATS_INITIALIZER (a size or version
 * the library does not know). */
sparrowResult_t sparrowCommGetStats(sparrowComm_t comm, sparrowStats* stats);

/* One peer's traffic during the last operation on this communicator, as this rank saw it. */
typedef struct {
  int rank;
  unsigned long long bytesSent;      /* handed to the transport for this peer */
  unsigned long long bytesReceived;  /* arrived from this peer */
  double firstByteSeconds;           /* first byte received from it, seconds after the call began (-1: none) */
  double lastByteSeconds;            /* last byte received from it (-1: none) */
  double receiveBytesPerSecond;      /* bytesReceived over (last - first byte); 0 when not measurable */
  double rttSeconds;                 /* round trip measured by the start-up probe (-1: not measured for this pair) */
} sparrowPeerStats;
/* The peers this rank exchanged data with in the last operation, by increasing rank: writes at most
 * maxPeers entries and sets *npeers to how many there are. */
sparrowResult_t sparrowCommGetPeerStats(sparrowComm_t comm, sparrowPeerStats* peers, int maxPeers, int* npeers);
/* Progress of the collective running now, or of the last one: bytes received and sent by this rank
 * since it began, and whether one is running (*inCall). Safe to call from another thread while a
 * collective runs (a progress bar, a watchdog); any argument may be NULL. */
sparrowResult_t sparrowCommGetProgress(sparrowComm_t comm, unsigned long long* bytesReceived,
                                       unsigned long long* bytesSent, int* inCall);
/* The last operation as one JSON object: role, bytes, the stage-by-stage timing (extract, encode,
 * first byte, last byte, verify, decode, commit, total; seconds, null where a stage is not this
 * rank's) and the peers. Writes at most len bytes including the terminating NUL and sets *needed (if
 * not NULL) to the length it needs; buf NULL with len 0 only asks for that length;
 * sparrowInvalidArgument when buf is too small. */
sparrowResult_t sparrowCommGetStatsJson(sparrowComm_t comm, char* buf, size_t len, size_t* needed);

/* ---- Models: named tensors, receivers' own layouts, versions ----
 * A model is a set of named tensors synchronised as one sparse step per call (the tensors of one
 * sparrowSparseBcast group, matched by name instead of by position). The root holds the logical
 * model (the trainer's tensors, whole); each receiver describes its own tensors: a tensor with no
 * pieces is the whole logical tensor of its name (same dtype and shape); a tensor with pieces holds
 * ranges of logical tensors, each along one dimension (a fused qkv_proj holds q, k and v along dim 0;
 * a tensor-parallel shard holds a slice), and elements no piece covers (vocabulary padding) are
 * never written. */
typedef struct {
  const char* logical; /* the logical tensor's name */
  int dim;             /* the dimension the piece is a range of */
  size_t start, stop;  /* logical[..., start:stop, ...] along dim */
  size_t offset;       /* ... is local[..., offset:offset + stop - start, ...]; other dimensions equal */
} sparrowPiece_t;

typedef struct {
  const char* name;             /* this rank's name for it (1..1024 bytes, unique in the model) */
  void* data;                   /* contiguous, row-major: the root reads it, receivers write it */
  sparrowDataType_t datatype;
  int ndim;                     /* 0..16 */
  const size_t* shape;          /* ndim sizes */
  const sparrowPiece_t* pieces; /* NULL with npieces 0: the whole logical tensor `name` */
  int npieces;
} sparrowTensor_t;

typedef struct sparrowModel* sparrowModel_t;

/* Describes this rank's tensors (copied; their memory must stay valid while the model lives). Local:
 * nothing travels until the first sparrowModelSync or sparrowModelStage, which every rank of the
 * communicator calls with the same root. Errors: sparrowInvalidArgument (a bad name, shape, piece
 * outside its tensor, pieces overlapping in one tensor, pieces on the root). Tensors may be host or
 * device memory; a receiver's pieces in device memory are read back to the host to be compared with
 * its host mirrors, and only the changed elements are written to them. The communicator must outlive
 * the model. On an elastic communicator a process that joins (sparrowCommJoin) creates its model as
 * the first one did: root 0 admits it at the start of a step and sends it the model's agreement, and
 * its first sparrowModelSync (or Stage) receives that step; in a split step it must hold the rows its
 * slot held (else sparrowInvalidUsage on it alone). */
sparrowResult_t sparrowModelCreate(sparrowModel_t* model, sparrowComm_t comm, const sparrowTensor_t* tensors,
                                   int ntensors, int root);
/* The same with several sources (sharded trainers, FSDP or tensor-parallel): sources[0..nsources)
 * are the ranks that hold the trainer's weights, the root among them, the same list on every rank. A
 * source's tensor is a whole logical tensor, or holds pieces along dim 0 (row ranges, fused and
 * padded allowed), or one piece along another dim that fills it (a row-parallel shard: columns of
 * every row); together the sources hold every element of every logical tensor exactly once (else the
 * first step fails on every rank with sparrowInvalidUsage naming the range). A tensor split along a
 * dim other than 0 travels as one block per source; a receiver gets the blocks its pieces overlap.
 * Each source sends its own part (no gather), in an
 * operation among it and the receivers; a receiver writes its tensors only once every source's part
 * of the step verified, so it never holds a mix of versions. On an elastic communicator the sources
 * agree on the members at the start of every step (a worker one source dropped is out of every
 * source's operations); a source that is lost fails the step on every rank (sparrowPeerLost naming
 * it), the workers' tensors holding the last version; a worker that joins (sparrowCommJoin) is
 * admitted at the sources' roll call, as with one source. Staging:
 * on a source, Stage sends its part as Sync does; a receiver stages every source's part as one step.
 * sources NULL or {root}: sparrowModelCreate. */
sparrowResult_t sparrowModelCreateSharded(sparrowModel_t* model, sparrowComm_t comm, const sparrowTensor_t* tensors,
                                          int ntensors, int root, const int* sources, int nsources);
/* One version step: the root pushes its tensors' current values, every receiver gets them in its
 * own tensors, bit-exact. The first call agrees on the model: the root sends the names, dtypes and
 * shapes of its tensors, and a receiver tensor or piece that does not fit them (an unknown name, a
 * shape, dtype or range that differs) fails the call on every rank with sparrowInvalidUsage naming
 * it (the next call tries again). The guarantees of sparrowSparseBcast hold for the whole model:
 * a receiver's tensors (pieces included) hold the old version or the new one; a receiver whose
 * tensors were written to since the last step gets sparrowVersionMismatch, nothing written, and
 * the next call brings it a full snapshot. Receivers with pieces keep a host copy of the logical
 * tensors they hold pieces of (the mirror), and each step compares their pieces with it and writes
 * only the 64-byte lines that changed. */
sparrowResult_t sparrowModelSync(sparrowModel_t model);
/* Staging, as sparrowSparseBcastStage / sparrowStageCommit (sparrowStageQuery tells readiness): the
 * receiver's tensors are only read until the commit. On the root (every source), Stage is Sync and
 * Commit does nothing. */
sparrowResult_t sparrowModelStage(sparrowModel_t model);
sparrowResult_t sparrowModelCommit(sparrowModel_t model);
/* The version this rank holds (the root: the last one it sent); equal on every rank that holds the
 * same version; 0 before the first step. */
sparrowResult_t sparrowModelGetVersion(sparrowModel_t model, unsigned long long* version);
/* The content digest of logical tensor `logical` as this rank holds it (device memory is read back to
 * the host for it): equal on two ranks exactly when they hold the same bits (up to a 64-bit hash),
 * whatever their layouts. */
sparrowResult_t sparrowModelGetDigest(sparrowModel_t model, const char* logical, unsigned long long* digest);
/* The same over rows [start, stop) (dim 0) of `logical`, on any rank that holds them: a tensor-parallel
 * shard, which receives only its own rows, or a source, which holds its own. The digests of rows that
 * tile a tensor add up (mod 2^64) to its sparrowModelGetDigest. sparrowInvalidUsage where this rank
 * does not hold those rows (or, for sparrowModelGetDigest, all of them). */
sparrowResult_t sparrowModelGetDigestRows(sparrowModel_t model, const char* logical, unsigned long long start,
                                          unsigned long long stop, unsigned long long* digest);
/* Frees the model (not collective); its tensors' next step in another model starts from a snapshot. */
sparrowResult_t sparrowModelDestroy(sparrowModel_t model);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPARROW_SPARROW_H_ */
