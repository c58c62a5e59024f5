// Broadcasts, dense (sparrowBroadcast) and sparse (sparrowSparseBcast), along a topology-aware tree:
// the entry points. What travels is in protocol.h, the phases of one operation in op.h, the roles in
// dense/broadcast.cpp, sparse/root.cpp and sparse/sink.h.
//
// The root returns once everything is queued; it collects the acknowledgements of earlier
// operations after streaming each new one (ack_window.h: a rank that refused one gets its resync in
// the new one), and waits for the current operation's only on the first, full operation for a
// buffer set, so that a mismatched call fails everywhere. Receivers acknowledge once a step is
// accepted (verified), before writing it, so a staged step does not hold the root back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/protocol.h"
#include "collectives/state.h"
#include "core/status.h"

namespace sparrow::coll {

// Dense broadcasts from one root (one, or a group): each is its own operation, but all the data goes
// first and the acknowledgements and verdicts travel once for all of them.
Status broadcast(Engine& e, const std::vector<BufferArg>& bufs, int root);
// One sparse operation over one or more buffers (a group): one checkpoint, one version step.
// `participants` (fixed communicators): the ranks taking part, the root among them; every other
// rank calls skip_op() in its place. Null: every rank.
Status sparse_bcast(Engine& e, const std::vector<BufferArg>& bufs, int root,
                    const std::vector<int>* participants = nullptr);
// A rank that takes no part in this operation (not among its participants) keeps the operation
// numbering in step with the others.
void skip_op(Engine& e);
// Staging (receivers): sparse_stage starts the operation and returns at once; a background thread
// receives, forwards, verifies and decodes it without writing the receive buffers (which the caller
// keeps reading, and must not write); stage_commit waits for it and writes (time proportional to the
// changes). On the root, sparse_stage is sparse_bcast. One staged step per communicator at a time;
// any other collective before the commit fails with kInvalidUsage.
Status sparse_stage(Engine& e, const std::vector<BufferArg>& bufs, int root);
// One operation of a staged group: a rank receiving several operations in a row (a model's parts,
// one per source) stages them as one step: received one after the other in the background, committed
// together (each written in order; the first failure is the result). `participants`: as for
// sparse_bcast (empty: every rank); a part this rank is not among the participants of is skipped
// (skip_op), in its place in the order.
struct StagePart {
  std::vector<BufferArg> bufs;
  int root;
  std::vector<int> participants;
};
Status sparse_stage_parts(Engine& e, const std::vector<StagePart>& parts);
struct StageProgress {
  bool pending = false, ready = false;
  uint64_t bytes_received = 0;  // checkpoint bytes received so far
  uint64_t staged_bytes = 0;    // memory holding the staged changes (known once ready)
};
StageProgress stage_progress(Engine& e);
Status stage_commit(Engine& e);
// Waits (up to SPARROW_TIMEOUT_S) until every operation rooted here was acknowledged, so that a
// root that destroys its communicator right after its last call does not cut that call short. A
// staged step not yet committed is received and dropped.
Status finish(Engine& e);
// kInvalidUsage while a staged step awaits its commit (every collective on the communicator checks).
Status no_stage_pending(Engine& e);
// Forgets the per-buffer state of `buff` on this rank (next operation on it is dense, or a resync).
Status sparse_reset(Engine& e, const void* buff);

}  // namespace sparrow::coll
