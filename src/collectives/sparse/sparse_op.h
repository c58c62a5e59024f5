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
};

Result<SparseOp> begin_sparse(Engine& e, const std::vector<BufferArg>& bufs, int root);
// The root's side (sparse/root.cpp). It does not wait for this operation's acknowledgements
// (except on the first, full one, whose arguments every rank must agree on).
Status sparse_root(Engine& e, const std::vector<BufferArg>& bufs, int root, const SparseOp& op);

}  // namespace sparrow::coll
