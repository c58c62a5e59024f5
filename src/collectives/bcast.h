// Broadcasts: dense (sparrowBroadcast) and sparse (sparrowSparseBcast), along a topology-aware tree.
//
// Sparse protocol for operation `seq` (all messages keyed (comm, seq, sub)):
//   sub 0          op header from the parent: kind, root, buffers (count, dtype), ranks that get a
//                  full snapshot straight from the root this time (resync)
//   sub 1          the checkpoint header
//   sub 2..n+1     checkpoint chunks, in the order the root produced them; each relay verifies a
//                  chunk's checksum and forwards it to its children at once (cut-through), then stages it
//   sub n+2        the checkpoint footer (the end marker)
//   kResyncSub     root -> rank: for a rank that fell out of step, a full snapshot, or the retained
//                  deltas from the version it holds to this operation's base (it applies this
//                  operation's delta after them, all in one write)
//   kAckSub        rank -> root: status of the operation on that rank (mismatch, resync needed, the
//                  version it holds), sent also when its call failed
// The root returns once everything is queued; it collects the acknowledgements of earlier operations
// after streaming each new one (a rank that refused one gets its snapshot in the new one), and waits
// for the current operation's only on the first, full operation for a buffer set, so that a
// mismatched call fails everywhere. Receivers acknowledge once a step is accepted (verified), before
// writing it, so a staged step does not hold the root back.
// A chunk is addressed by (seq, sub) and checked on its own, so a child can later re-attach to
// another source and resume from the last chunk it verified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/comm.h"
#include "core/status.h"

namespace sparrow::coll {

struct BufferArg {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  int dtype = 0;
};

// Dense broadcasts from one root (one, or a group): each is its own operation, but all the data goes
// first and the acknowledgements and verdicts travel once for all of them.
Status broadcast(Comm& c, const std::vector<BufferArg>& bufs, int root);
// One sparse operation over one or more buffers (a group): one checkpoint, one version step.
Status sparse_bcast(Comm& c, const std::vector<BufferArg>& bufs, int root);
// Staging (receivers): sparse_stage starts the operation and returns at once; a background thread
// receives, forwards, verifies and decodes it without writing the receive buffers (which the caller
// keeps reading, and must not write); stage_commit waits for it and writes (time proportional to the
// changes). On the root, sparse_stage is sparse_bcast. One staged step per communicator at a time;
// any other collective before the commit fails with kInvalidUsage.
Status sparse_stage(Comm& c, const std::vector<BufferArg>& bufs, int root);
struct StageProgress {
  bool pending = false, ready = false;
  uint64_t bytes_received = 0;  // checkpoint bytes received so far
  uint64_t staged_bytes = 0;    // memory holding the staged changes (known once ready)
};
StageProgress stage_progress(Comm& c);
Status stage_commit(Comm& c);
// Waits (up to SPARROW_TIMEOUT_S) until every operation rooted here was acknowledged, so that a
// root that destroys its communicator right after its last call does not cut that call short. A
// staged step not yet committed is received and dropped.
Status finish(Comm& c);
// kInvalidUsage while a staged step awaits its commit (every collective on the communicator checks).
Status no_stage_pending(Comm& c);
// Forgets the per-buffer state of `buff` on this rank (next operation on it is dense, or a resync).
Status sparse_reset(Comm& c, const void* buff);

}  // namespace sparrow::coll
