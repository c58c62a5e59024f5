// Broadcasts: dense (sparrowBroadcast) and sparse (sparrowSparseBcast), along a topology-aware tree.
//
// Sparse protocol for operation `seq` (all messages keyed (comm, seq, sub)):
//   sub 0          op header from the parent: kind, root, buffers (count, dtype), ranks that get a
//                  full snapshot straight from the root this time (resync)
//   sub 1          the checkpoint header
//   sub 2..n+1     checkpoint chunks, in the order the root produced them; each relay verifies a
//                  chunk's checksum and forwards it to its children at once (cut-through), then stages it
//   sub n+2        the checkpoint footer (the end marker)
//   kResyncSub     root -> rank: a full snapshot for a rank that fell out of step
//   kAckSub        rank -> root: status of the operation on that rank (mismatch, resync needed, ...)
// The root returns once everything is queued; it collects acknowledgements asynchronously (at its
// later calls, with a window of kAckWindow operations in flight), except on the first, full
// operation for a buffer set, where it waits for them so that a mismatched call fails everywhere.
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
// Waits (up to SPARROW_TIMEOUT_S) until every operation rooted here was acknowledged, so that a
// root that destroys its communicator right after its last call does not cut that call short.
Status finish(Comm& c);
// Forgets the per-buffer state of `buff` on this rank (next operation on it is dense, or a resync).
Status sparse_reset(Comm& c, const void* buff);

}  // namespace sparrow::coll
