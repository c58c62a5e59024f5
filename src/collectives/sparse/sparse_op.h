// What every rank computes alike at the start of a sparse operation.
#pragma once

#include <vector>

#include "collectives/state.h"

namespace sparrow::coll {

struct SparseOp {
  uint64_t seq = 0;
  std::vector<kernels::cpu::TensorSpec> layout;
  BufferKey key;       // this rank's buffers (root: send, others: recv)
  size_t dense = 0;    // bytes of the buffers
  topology::Tree tree;
  // Elastic: the members the tree is built over (the root's list; a receiver's comes with the header,
  // and so does its tree).
  std::vector<int> members;
  std::vector<int> joined;  // elastic, the root: the ranks admitted at this operation
  // An operation among some of the communicator's ranks only (a model's source and its receivers;
  // the other sources skip it): the tree is built over them (elastic: the live ones) and the root
  // hears from them. Empty: every rank.
  std::vector<int> participants;
};

// `participants`: null for every rank (see SparseOp::participants).
Result<SparseOp> begin_sparse(Engine& e, const std::vector<BufferArg>& bufs, int root,
                              const std::vector<int>* participants = nullptr);
// The root's side (sparse/root.cpp). It does not wait for this operation's acknowledgements
// (except on the first, full one, whose arguments every rank must agree on).
Status sparse_root(Engine& e, const std::vector<BufferArg>& bufs, int root, const SparseOp& op);
// The rate (bytes/s) the root's value codecs are chosen for (format::ValueChoiceOptions::link_Bps;
// 0: by bytes alone). `mbit` (SPARROW_CODEC_LINK_MBIT) > 0 names it, < 0 asks for the fewest bytes;
// 0: the slowest probed rate from this rank (`bw_Bps`, by rank), divided by the `copies` it sends of
// every chunk (its children), which share its uplink.
double codec_link_Bps(int64_t mbit, const std::vector<double>& bw_Bps, int self, size_t copies);

}  // namespace sparrow::coll
