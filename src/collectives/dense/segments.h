// SPDX-License-Identifier: Apache-2.0
// The pieces of a dense broadcast both protocols share (a fixed communicator's one operation per
// buffer in dense/broadcast.cpp, an elastic one's one operation per group in elastic/dense.cpp):
// the operation's plan, the header, the segments sent and received, the root's host copy of a
// device buffer and its own receive buffer, the call's stats; and the two protocols' entry points,
// between which the entry (bcast.cpp) chooses.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "collectives/fanout.h"
#include "collectives/protocol.h"
#include "collectives/relay.h"
#include "collectives/state.h"

namespace sparrow::coll::dense {

struct DenseOp {
  uint64_t seq = 0;
  topology::Tree tree;
  size_t bytes = 0;
  Status result;
  std::vector<uint8_t> staging;  // device buffers, and receivers' scratch on a mismatch
  bool to_device = false;
};

// SPARROW_SEGMENT_BYTES.
size_t segment_bytes();
size_t segments(size_t bytes, size_t seg);
size_t bytes_of(const BufferArg& b);
size_t bytes_of(const std::pair<uint64_t, uint8_t>& hb);
OpHeader dense_header(const std::vector<BufferArg>& bufs, int root);
// The root's data of `b` in host memory: the send buffer itself, or (a device buffer) its copy in
// `staging` (the transport reads host memory).
Result<const uint8_t*> host_source(const BufferArg& b, std::vector<uint8_t>& staging);
// `bytes` from `src` in segments of `seg`, parts first_sub.. (each also into `parts`, when given);
// returns the part after the last.
uint32_t send_segments(const uint8_t* src, size_t bytes, size_t seg, uint32_t first_sub, Fanout& out, Parts* parts);
// The segments of one buffer (parts first_sub..) into `dst`, each forwarded as it lands.
Status receive_segments(Relay& relay, uint8_t* dst, size_t bytes, size_t seg, uint32_t first_sub);
// The root's own receive buffer gets the data too (when it is not the send buffer).
Status copy_to_recv(const BufferArg& b, const uint8_t* src);

// A fixed communicator's broadcast: one operation per buffer (dense/broadcast.cpp); `ops` gets them.
Status broadcast(Engine& e, const std::vector<BufferArg>& bufs, int root, std::vector<DenseOp>& ops);
// What a dense call moved and its tree (the first operation's) into the engine's stats, also for a
// failed call.
void record(Engine& e, const std::vector<BufferArg>& bufs, const std::vector<DenseOp>& ops, int root, double t0);

}  // namespace sparrow::coll::dense

namespace sparrow::coll::elastic {
// An elastic communicator's broadcast: one operation for the group over the live members
// (elastic/dense.cpp); `ops` gets it.
Status dense_broadcast(Engine& e, const std::vector<BufferArg>& bufs, int root, std::vector<dense::DenseOp>& ops);
}  // namespace sparrow::coll::elastic
